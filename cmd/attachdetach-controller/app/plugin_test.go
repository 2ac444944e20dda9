package app

import (
	"bytes"
	"context"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/controller"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/explain"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/reconciler"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/version"
)

// pluginRun is one run of the plugin's command line, explain's run replaced by
// keeping its options.
type pluginRun struct {
	options        *ExplainOptions
	stdout, stderr string
	err            error
}

func runPlugin(t *testing.T, args ...string) pluginRun {
	t.Helper()
	var r pluginRun
	var stdout, stderr bytes.Buffer
	cmd := newPluginCommand("kubectl attachdetach", &stdout, &stderr, func(_ context.Context, o *ExplainOptions) error {
		r.options = o
		return nil
	})
	cmd.SetArgs(args)
	r.err = cmd.ExecuteContext(t.Context())
	r.stdout, r.stderr = stdout.String(), stderr.String()
	return r
}

func TestExplainKeepsItsFlags(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want func(o *ExplainOptions)
	}{
		{"defaults", []string{"explain", "pod/web-0"}, func(*ExplainOptions) {}},
		{"flags after the target", []string{"explain", "pv/data", "-o", "json", "--timeout=5s"}, func(o *ExplainOptions) {
			o.Target = explain.Target{Kind: explain.PV, Name: "data"}
			o.Output, o.Timeout = "json", 5*time.Second
		}},
		{"flags before the target", []string{"explain", "--output=yaml", "--from-leader", "node/worker-3"}, func(o *ExplainOptions) {
			o.Target = explain.Target{Kind: explain.Node, Name: "worker-3"}
			o.Output, o.FromLeader = "yaml", true
		}},
		{"leader flags", []string{"explain", "va/csi-123", "--from-leader", "--leader-url=http://127.0.0.1:8080", "--leader-port=9090",
			"--leader-elect-resource-namespace=kube-system", "--leader-elect-resource-name=adc"}, func(o *ExplainOptions) {
			o.Target = explain.Target{Kind: explain.VolumeAttachment, Name: "csi-123"}
			o.FromLeader, o.LeaderURL, o.LeaderPort, o.LeaseNamespace, o.LeaseName = true, "http://127.0.0.1:8080", 9090, "kube-system", "adc"
		}},
		{"detach policy flags", []string{"explain", "pvc/data", "--max-wait-for-unmount=10m", "--max-wait-for-unmount-per-driver=ebs.csi.aws.com=never",
			"--disable-force-detach-on-timeout", "--detach-on-shutdown-taint"}, func(o *ExplainOptions) {
			o.Target = explain.Target{Kind: explain.Claim, Name: "data"}
			o.Policy.MaxWaitForUnmount = 10 * time.Minute
			o.Policy.MaxWaitForUnmountPerDriver = map[string]reconciler.DriverUnmountPolicy{"ebs.csi.aws.com": {NeverForce: true}}
			o.Policy.DisableForceDetachOnTimeout, o.Policy.DetachOnShutdownTaint = true, true
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runPlugin(t, tc.args...)
			if r.err != nil {
				t.Fatalf("%v: %v", tc.args, r.err)
			}
			want := &ExplainOptions{
				Config: r.options.Config, Output: "text", Target: explain.Target{Kind: explain.Pod, Name: "web-0"},
				LeaderPort: 8080, LeaseNamespace: "attachdetach-controller", LeaseName: "attachdetach-controller",
				Timeout: time.Minute, Policy: controller.DefaultOptions(),
			}
			tc.want(want)
			if !reflect.DeepEqual(r.options, want) {
				t.Errorf("%v gave\n%+v, want\n%+v", tc.args, *r.options, *want)
			}
		})
	}
}

// twoClusters writes a kubeconfig with contexts "staging" (current, namespace
// web) and "prod" (namespace shop), each with its cluster and user.
func twoClusters(t *testing.T) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	for name, ns := range map[string]string{"staging": "web", "prod": "shop"} {
		cfg.Clusters[name] = &clientcmdapi.Cluster{Server: "https://" + name + ".example:6443"}
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: name + "-token"}
		cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: ns}
	}
	cfg.CurrentContext = "staging"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestExplainTakesKubectlsFlags(t *testing.T) {
	kubeconfig := "--kubeconfig=" + twoClusters(t)
	cases := []struct {
		name                string
		args                []string
		host, namespace, as string
		groups              []string
		token               string
	}{
		{"the current context", []string{"explain", "pod/web-0", kubeconfig},
			"https://staging.example:6443", "web", "", nil, "staging-token"},
		{"--context", []string{"explain", "pod/web-0", kubeconfig, "--context", "prod"},
			"https://prod.example:6443", "shop", "", nil, "prod-token"},
		{"-n", []string{"explain", "pod/web-0", kubeconfig, "--context=prod", "-n", "other"},
			"https://prod.example:6443", "other", "", nil, "prod-token"},
		{"--as and --as-group", []string{"explain", "pod/web-0", kubeconfig, "--as=jane", "--as-group=ops", "--as-group=sre"},
			"https://staging.example:6443", "web", "jane", []string{"ops", "sre"}, "staging-token"},
		{"--server, --user and --namespace", []string{"explain", "pod/web-0", kubeconfig, "--server=https://elsewhere:443", "--user=prod", "--namespace=x"},
			"https://elsewhere:443", "x", "", nil, "prod-token"},
		{"--token", []string{"explain", "pod/web-0", kubeconfig, "--token=mine"},
			"https://staging.example:6443", "web", "", nil, "mine"},
		{"kubectl's flags before the command", []string{kubeconfig, "--context=prod", "explain", "pod/web-0"},
			"https://prod.example:6443", "shop", "", nil, "prod-token"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runPlugin(t, tc.args...)
			if r.err != nil {
				t.Fatal(r.err)
			}
			cfg, err := r.options.Config.ToRESTConfig()
			if err != nil {
				t.Fatal(err)
			}
			ns, _, err := r.options.Config.ToRawKubeConfigLoader().Namespace()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != tc.host || ns != tc.namespace || cfg.BearerToken != tc.token ||
				cfg.Impersonate.UserName != tc.as || !slices.Equal(cfg.Impersonate.Groups, tc.groups) {
				t.Errorf("%v: host %s, namespace %s, token %s, impersonating %q %v; want %s, %s, %s, %q %v", tc.args,
					cfg.Host, ns, cfg.BearerToken, cfg.Impersonate.UserName, cfg.Impersonate.Groups, tc.host, tc.namespace, tc.token, tc.as, tc.groups)
			}
		})
	}
}

func TestExplainRefusesCommandLinesItCannotRun(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"explain"}, "explain takes exactly one KIND/NAME, got 0 arguments"},
		{[]string{"explain", "pod/a", "pod/b"}, "explain takes exactly one KIND/NAME, got 2 arguments"},
		{[]string{"explain", "web-0"}, `"web-0" is not one of pod/NAME`},
		{[]string{"explain", "deployment/web"}, `"deployment/web" is not one of pod/NAME`},
		{[]string{"explain", "pod/web-0", "-o", "wide"}, `--output must be one of text, json, yaml, got "wide"`},
		{[]string{"explain", "pod/web-0", "--max-wait-for-unmount=0s"}, "the max wait for unmount must be positive"},
		{[]string{"explain", "pod/web-0", "--max-wait-for-unmount-per-driver=ebs"}, `"ebs" is not DRIVER=DURATION or DRIVER=never`},
		{[]string{"explain", "pod/web-0", "--selector=app"}, "unknown flag: --selector\nSee 'kubectl attachdetach explain --help' for usage."},
		{[]string{"describe", "pod/web-0"}, `unknown command "describe" for "kubectl attachdetach"`},
	}
	for _, tc := range cases {
		r := runPlugin(t, tc.args...)
		if ExitCode(r.err) != 2 || !strings.Contains(r.err.Error(), tc.want) {
			t.Errorf("%v: exit code %d, error %v; want 2 and %q", tc.args, ExitCode(r.err), r.err, tc.want)
		}
		if r.options != nil {
			t.Errorf("%v: explain ran", tc.args)
		}
	}
}

func TestPluginHelpReadsLikeKubectls(t *testing.T) {
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{
			"Examples:\n  # Why the volume of a pod waits\n  kubectl attachdetach explain pod/web-0 -n shop\n",
			"Available Commands:\n  explain      Tell why the volumes of an object are, or are not, attached\n",
			"Usage:\n  kubectl attachdetach [command] [options]\n\n",
			`Use "kubectl attachdetach <command> --help" for more information about a given command.` + "\n",
			`Use "kubectl attachdetach options" for a list of global command-line options (applies to all commands).` + "\n",
		}},
		{nil, []string{"Usage:\n  kubectl attachdetach [command] [options]\n"}},
		{[]string{"explain", "--help"}, []string{
			"Examples:\n  # Why the volume of a pod waits, in the context's namespace\n  kubectl attachdetach explain pod/web-0\n",
			"Options:\n    -o, --output='text':\n\tOutput format: text, json or yaml.\n\n    --timeout=1m0s:\n",
			"Leader options:\n    --from-leader=false:\n",
			"Detach policy options (the deployment's, for a snapshot):\n    --detach-on-shutdown-taint=false:\n",
			"    --max-wait-for-unmount=6m0s:\n",
			"Usage:\n  kubectl attachdetach explain (pod|pvc|pv|node|volumeattachment)/NAME [options]\n\n",
			`Use "kubectl attachdetach options" for a list of global command-line options (applies to all commands).` + "\n",
		}},
		{[]string{"options"}, []string{
			"The following options can be passed to any command:\n\n",
			"    --as='':\n", "    --context='':\n", "    --kubeconfig='':\n", "    -n, --namespace='':\n", "    --request-timeout='0':\n",
		}},
	}
	for _, tc := range cases {
		r := runPlugin(t, tc.args...)
		if r.err != nil {
			t.Fatalf("%v: %v", tc.args, r.err)
		}
		for _, want := range tc.want {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("%v lacks %q:\n%s", tc.args, want, r.stdout)
			}
		}
	}
	explainHelp := runPlugin(t, "explain", "--help").stdout
	if strings.Contains(explainHelp, "--kubeconfig") {
		t.Errorf("explain --help lists kubectl's flags, which belong to options:\n%s", explainHelp)
	}
}

func TestPluginCompletesKindsFlagsAndKubeconfigNames(t *testing.T) {
	kubeconfig := twoClusters(t)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"explain", ""}, "pod/\npvc/\npv/\nnode/\nvolumeattachment/\n:6\n"},
		{[]string{"explain", "p"}, "pod/\npvc/\npv/\n:6\n"},
		{[]string{"explain", "pod/web-0", ""}, ":4\n"},
		{[]string{"explain", "-o", ""}, "text\njson\nyaml\n:4\n"},
		{[]string{"explain", "--kubeconfig=" + kubeconfig, "--context", ""}, "prod\nstaging\n:4\n"},
		{[]string{"explain", "--kubeconfig=" + kubeconfig, "--user", ""}, "prod\nstaging\n:4\n"},
		{[]string{"--kubeconfig=" + kubeconfig, "--cluster", ""}, "prod\nstaging\n:4\n"},
	}
	for _, tc := range cases {
		r := runPlugin(t, append([]string{"__complete"}, tc.args...)...)
		if r.err != nil || r.stdout != tc.want {
			t.Errorf("completing %q: %v\n%q, want\n%q", tc.args, r.err, r.stdout, tc.want)
		}
	}
}

func TestListNamesSortsOneNamespace(t *testing.T) {
	scheme := metadatafake.NewTestScheme()
	metav1.AddMetaToScheme(scheme)
	client := metadatafake.NewSimpleMetadataClient(scheme,
		podMetadata("shop", "web-1"), podMetadata("shop", "web-0"), podMetadata("other", "db-0"))
	names, err := listNames(t.Context(), client, kindResources[explain.Pod], "shop")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"web-0", "web-1"}; !slices.Equal(names, want) {
		t.Errorf("names = %v, want %v", names, want)
	}
}

func podMetadata(namespace, name string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
	}
}

func TestPluginVersionIsTheControllers(t *testing.T) {
	r := runPlugin(t, "version")
	if r.err != nil || r.stdout != version.String()+"\n" {
		t.Errorf("version: %v, %q; want %q", r.err, r.stdout, version.String()+"\n")
	}
}
