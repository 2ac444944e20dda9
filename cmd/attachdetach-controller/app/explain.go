package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/controller"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/explain"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
)

// ExplainPath is where the leader's HTTP endpoint serves explanations from its
// live state.
const ExplainPath = "/debug/explain"

// leaderTimeout bounds the wait for the leader's answer, so that a leader that
// cannot be reached leaves time to read the cluster instead.
const leaderTimeout = 10 * time.Second

// ExplainOptions are the settings of the explain command.
type ExplainOptions struct {
	// Config is the cluster and the user to read it as: kubectl's flags
	// (--kubeconfig, --context, --namespace, --as, ...).
	Config genericclioptions.RESTClientGetter
	Output string
	Target explain.Target
	// FromLeader asks the running leader; LeaderURL is where it listens (empty:
	// through the API server's proxy to the pod the Lease names, on LeaderPort).
	FromLeader     bool
	LeaderURL      string
	LeaderPort     int
	LeaseNamespace string
	LeaseName      string
	Timeout        time.Duration
	// Policy holds the detach policy a snapshot applies: the deployment's own
	// flags, given to explain as to the controller.
	Policy controller.Options
}

// outputFormats are the values of explain's --output.
var outputFormats = []string{"text", "json", "yaml"}

// Validate refuses settings explain cannot run with, naming the flag.
func (o *ExplainOptions) Validate() error {
	if !slices.Contains(outputFormats, o.Output) {
		return fmt.Errorf("--output must be one of %s, got %q", strings.Join(outputFormats, ", "), o.Output)
	}
	return o.Policy.Validate()
}

// RunExplain prints the explanation of the target.
func RunExplain(ctx context.Context, o *ExplainOptions, stdout, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if o.Target.Kind.Namespaced() && o.Target.Namespace == "" {
		ns, _, err := o.Config.ToRawKubeConfigLoader().Namespace()
		if err != nil {
			return fmt.Errorf("reading the kubeconfig's namespace: %w", err)
		}
		o.Target.Namespace = ns
	}
	client, err := readOnlyClient(o.Config, "attachdetach-controller-explain")
	if err != nil {
		return err
	}
	var report explain.Report
	if o.FromLeader {
		leaderCtx, cancelLeader := context.WithTimeout(ctx, leaderTimeout)
		report, err = askLeader(leaderCtx, client, o)
		cancelLeader()
		if err != nil {
			fmt.Fprintf(stderr, "Could not ask the leader (%v); reading the cluster instead.\n", err)
		}
	}
	if !o.FromLeader || err != nil {
		if report, err = explainSnapshot(ctx, client, o.Target, o.Policy); err != nil {
			return err
		}
	}
	return writeReport(stdout, report, o.Output)
}

// readOnlyClient is a client for the cluster and user kubectl's flags name, that
// refuses every write.
func readOnlyClient(config genericclioptions.RESTClientGetter, userAgent string) (kubernetes.Interface, error) {
	cfg, err := readOnlyConfig(config, userAgent)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the client: %w", err)
	}
	return client, nil
}

// readOnlyConfig is the client configuration kubectl's flags give, made to
// refuse every write.
func readOnlyConfig(config genericclioptions.RESTClientGetter, userAgent string) (*rest.Config, error) {
	cfg, err := config.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = userAgent
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return readOnly{rt} })
	return cfg, nil
}

// explainSnapshot builds the controller's state from the cluster, as it does at
// start-up, and explains from it with the given detach policy.
func explainSnapshot(ctx context.Context, client kubernetes.Interface, t explain.Target, policy controller.Options) (explain.Report, error) {
	if err := controller.CheckCanList(ctx, client); err != nil {
		if apierrors.IsForbidden(err) {
			return explain.Report{}, fmt.Errorf("reading the cluster: %w (explain needs list and watch on %s: the explain-reader roles of the manifests grant them)",
				err, strings.Join(controller.ReadResources(), ", "))
		}
		return explain.Report{}, fmt.Errorf("reading the cluster: %w", err)
	}
	factory := controller.NewInformerFactory(client)
	defer factory.Shutdown()
	infoCtx, stop := context.WithCancel(klog.NewContext(ctx, klog.Background()))
	defer stop()
	c, err := controller.New(controller.Clients{API: client, NodeStatus: client}, factory, discardEvents{}, metrics.New(), policy)
	if err != nil {
		return explain.Report{}, err
	}
	if err := c.Snapshot(infoCtx); err != nil {
		return explain.Report{}, fmt.Errorf("reading the cluster: %w", err)
	}
	return c.Explain(infoCtx, t, false)
}

// askLeader gets the leader's explanation from its HTTP endpoint.
func askLeader(ctx context.Context, client kubernetes.Interface, o *ExplainOptions) (explain.Report, error) {
	query := url.Values{"target": {string(o.Target.Kind) + "/" + o.Target.Name}, "namespace": {o.Target.Namespace}}
	var body []byte
	var err error
	if o.LeaderURL != "" {
		body, err = httpGet(ctx, strings.TrimSuffix(o.LeaderURL, "/")+ExplainPath+"?"+query.Encode())
	} else {
		body, err = proxyGet(ctx, client, o, query)
	}
	if err != nil {
		return explain.Report{}, err
	}
	var r explain.Report
	if err := json.Unmarshal(body, &r); err != nil {
		return explain.Report{}, fmt.Errorf("decoding the leader's answer: %w", err)
	}
	return r, nil
}

func httpGet(ctx context.Context, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// proxyGet reaches the pod the Lease names through the API server's proxy.
func proxyGet(ctx context.Context, client kubernetes.Interface, o *ExplainOptions, query url.Values) ([]byte, error) {
	lease, err := client.CoordinationV1().Leases(o.LeaseNamespace).Get(ctx, o.LeaseName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the leader Lease %s/%s: %w", o.LeaseNamespace, o.LeaseName, err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		return nil, fmt.Errorf("the Lease %s/%s names no leader", o.LeaseNamespace, o.LeaseName)
	}
	pod, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_")
	params := map[string]string{}
	for k := range query {
		params[k] = query.Get(k)
	}
	return client.CoreV1().Pods(o.LeaseNamespace).ProxyGet("http", pod, strconv.Itoa(o.LeaderPort), ExplainPath, params).DoRaw(ctx)
}

func writeReport(w io.Writer, r explain.Report, format string) error {
	switch format {
	case "json":
		out, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", out)
		return err
	case "yaml":
		out, err := yaml.Marshal(r)
		if err != nil {
			return err
		}
		_, err = w.Write(out)
		return err
	}
	return explain.WriteText(w, r)
}

// explainHandler serves explanations from the leader's live state; current
// returns the running controller, nil while this replica does not lead.
func explainHandler(current func() *controller.Controller) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		c := current()
		if c == nil {
			http.Error(w, "this replica is not the leader", http.StatusServiceUnavailable)
			return
		}
		t, err := explain.ParseTarget(req.URL.Query().Get("target"), req.URL.Query().Get("namespace"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r, err := c.Explain(req.Context(), t, true)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(r); err != nil {
			klog.FromContext(req.Context()).Error(err, "Writing an explanation")
		}
	})
}
