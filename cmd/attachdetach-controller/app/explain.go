package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
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
	// through a port-forward of the API server to the pod the Lease names, on
	// LeaderPort).
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
	userConfig, err := o.Config.ToRESTConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	userConfig = rest.CopyConfig(userConfig)
	userConfig.UserAgent = "attachdetach-controller-explain"
	client, err := readOnlyClient(o.Config, userConfig.UserAgent)
	if err != nil {
		return err
	}
	var report explain.Report
	if o.FromLeader {
		leaderCtx, cancelLeader := context.WithTimeout(ctx, leaderTimeout)
		report, err = askLeader(leaderCtx, client, userConfig, o)
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
	return c.Explainer().Explain(infoCtx, t, false)
}

// askLeader gets the leader's explanation from its HTTP endpoint. Over HTTPS it
// sends the user's credentials from userConfig, which the leader has the API
// server review: the user needs get on the non-resource URL /debug/explain. It
// refuses to ask as an impersonated user, whom the leader would not see.
func askLeader(ctx context.Context, client kubernetes.Interface, userConfig *rest.Config, o *ExplainOptions) (explain.Report, error) {
	if imp := userConfig.Impersonate; imp.UserName != "" || imp.UID != "" || len(imp.Groups) > 0 || len(imp.Extra) > 0 {
		// The leader authenticates the credentials themselves; impersonation is
		// the API server's, and the leader would answer the real user.
		return explain.Report{}, errors.New("the leader checks your own credentials, not --as or --as-group")
	}
	query := url.Values{"target": {string(o.Target.Kind) + "/" + o.Target.Name}, "namespace": {o.Target.Namespace}}
	base := strings.TrimSuffix(o.LeaderURL, "/")
	if base == "" {
		pod, err := leaderPod(ctx, client, o)
		if err != nil {
			return explain.Report{}, err
		}
		local, stop, err := portForward(ctx, userConfig, client, o.LeaseNamespace, pod, o.LeaderPort)
		if err != nil {
			return explain.Report{}, err
		}
		defer stop()
		base = "https://" + local
	}
	body, err := leaderGet(ctx, userConfig, base+ExplainPath+"?"+query.Encode())
	if err != nil {
		return explain.Report{}, err
	}
	var r explain.Report
	if err := json.Unmarshal(body, &r); err != nil {
		return explain.Report{}, fmt.Errorf("decoding the leader's answer: %w", err)
	}
	return r, nil
}

// leaderGet gets u: over HTTPS with the credentials of userConfig, its token or
// its client certificate, not checking the leader's certificate, which is
// self-signed unless the deployment gives one; over plain HTTP with no
// credentials at all.
func leaderGet(ctx context.Context, userConfig *rest.Config, u string) ([]byte, error) {
	httpClient := http.DefaultClient
	if strings.HasPrefix(u, "https://") {
		cfg := rest.CopyConfig(userConfig)
		cfg.TLSClientConfig = rest.TLSClientConfig{
			Insecure: true,
			CertFile: cfg.CertFile, KeyFile: cfg.KeyFile,
			CertData: cfg.CertData, KeyData: cfg.KeyData,
		}
		var err error
		if httpClient, err = rest.HTTPClientFor(cfg); err != nil {
			return nil, fmt.Errorf("creating the client for the leader: %w", err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient.Do(req)
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

// leaderPod is the pod the Lease names as its holder.
func leaderPod(ctx context.Context, client kubernetes.Interface, o *ExplainOptions) (string, error) {
	lease, err := client.CoordinationV1().Leases(o.LeaseNamespace).Get(ctx, o.LeaseName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading the leader Lease %s/%s: %w", o.LeaseNamespace, o.LeaseName, err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		return "", fmt.Errorf("the Lease %s/%s names no leader", o.LeaseNamespace, o.LeaseName)
	}
	pod, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_")
	return pod, nil
}

// portForward forwards a free port of 127.0.0.1 to the pod's port through the
// API server (create on pods/portforward), as kubectl port-forward does, and
// returns its host:port. The API server's proxy (pods/proxy) would not do: it
// drops the user's credentials, and the leader would see an anonymous request.
func portForward(ctx context.Context, userConfig *rest.Config, client kubernetes.Interface, namespace, pod string, port int) (local string, stop func(), err error) {
	transport, upgrader, err := spdy.RoundTripperFor(userConfig)
	if err != nil {
		return "", nil, fmt.Errorf("setting up the port-forward: %w", err)
	}
	u := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	forwardCtx, cancel := context.WithCancel(ctx)
	ready := make(chan struct{})
	var errOut strings.Builder
	fw, err := portforward.NewOnAddressesWithContext(forwardCtx, dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, ready, io.Discard, &errOut)
	if err != nil {
		cancel()
		return "", nil, fmt.Errorf("setting up the port-forward: %w", err)
	}
	failed := make(chan error, 1)
	go func() { failed <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-failed:
		cancel()
		return "", nil, fmt.Errorf("port-forward to pod %s/%s: %w", namespace, pod, err)
	case <-ctx.Done():
		cancel()
		return "", nil, fmt.Errorf("port-forward to pod %s/%s: %w", namespace, pod, ctx.Err())
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		cancel()
		return "", nil, fmt.Errorf("port-forward to pod %s/%s: no local port: %v", namespace, pod, err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local))), cancel, nil
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
		r, err := c.Explainer().Explain(req.Context(), t, true)
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
