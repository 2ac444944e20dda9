package chart

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/attachdetach-controller/attachdetach-controller/cmd/attachdetach-controller/app"
	"github.com/attachdetach-controller/attachdetach-controller/internal/monitoring"
)

// TestValuesSetTheControllerFlags sets every value that maps to a flag of the
// controller, and has the controller's own flag parser read the rendered arguments.
func TestValuesSetTheControllerFlags(t *testing.T) {
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(`
replicas: 1
httpPort: 9090
logging:
  verbosity: 5
leaderElection:
  enabled: false
  leaseName: my-lease
  leaseDuration: 30s
  renewDeadline: 20s
  retryPeriod: 4s
controller:
  maxWaitForUnmount: 10m
  maxWaitForUnmountPerDriver:
    ebs.csi.aws.com: 30s
    nfs.csi.k8s.io: never
  disableForceDetachOnTimeout: true
  detachOnShutdownTaint: true
  reconcileSyncPeriod: 5m
  disableReconcileSync: true
  operationTimeout: 3m
  workers: 1000000
  statusWorkers: 32
  statusMinBatchWindow: 250ms
  kubeAPIContentType: application/json
  kubeAPIQPS: 50.5
  kubeAPIBurst: 100
  eventQPS: 20
  eventBurst: 70
  shadow: true
  shadowGrace: 5m
  enablePprof: true
extraArgs: ["--kubeconfig=/etc/kubeconfig"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	args := containerArgs(t, helmTemplate(t, "--values", values))
	opts, err := app.ParseFlags(args, io.Discard)
	if err != nil {
		t.Fatalf("the controller refuses the rendered arguments %q: %v", args, err)
	}
	c := opts.Controller
	for _, check := range []struct {
		flag      string
		got, want any
	}{
		{"--http-endpoint", opts.HTTPEndpoint, ":9090"},
		{"--leader-elect", opts.LeaderElect, false},
		{"--leader-elect-resource-name", opts.LeaderElectionName, "my-lease"},
		{"--leader-elect-lease-duration", opts.LeaseDuration, 30 * time.Second},
		{"--leader-elect-renew-deadline", opts.RenewDeadline, 20 * time.Second},
		{"--leader-elect-retry-period", opts.RetryPeriod, 4 * time.Second},
		{"--max-wait-for-unmount", c.MaxWaitForUnmount, 10 * time.Minute},
		{"--max-wait-for-unmount-per-driver", len(c.MaxWaitForUnmountPerDriver), 2},
		{"--disable-force-detach-on-timeout", c.DisableForceDetachOnTimeout, true},
		{"--detach-on-shutdown-taint", c.DetachOnShutdownTaint, true},
		{"--attach-detach-reconcile-sync-period", c.SyncPeriod, 5 * time.Minute},
		{"--disable-attach-detach-reconcile-sync", c.DisableSync, true},
		{"--operation-timeout", c.OperationTimeout, 3 * time.Minute},
		{"--workers", c.Workers, 1000000},
		{"--status-workers", c.StatusWorkers, 32},
		{"--status-min-batch-window", c.StatusMinBatchWindow, 250 * time.Millisecond},
		{"--kube-api-content-type", opts.ContentType, "application/json"},
		{"--kube-api-qps", opts.KubeAPIQPS, 50.5},
		{"--kube-api-burst", opts.KubeAPIBurst, 100},
		{"--event-qps", opts.EventQPS, 20.0},
		{"--event-burst", opts.EventBurst, 70},
		{"--shadow", c.Shadow, true},
		{"--shadow-grace", c.ShadowGrace, 5 * time.Minute},
		{"--enable-pprof", opts.EnablePprof, true},
		{"extraArgs", opts.Kubeconfig, "/etc/kubeconfig"},
	} {
		if !reflect.DeepEqual(check.got, check.want) {
			t.Errorf("%s = %v, want %v (arguments %q)", check.flag, check.got, check.want, args)
		}
	}
	for _, want := range []string{"--v=5", "--max-wait-for-unmount-per-driver=ebs.csi.aws.com=30s,nfs.csi.k8s.io=never"} {
		if !slices.Contains(args, want) {
			t.Errorf("arguments %q lack %s", args, want)
		}
	}
}

func TestLoggingFormatIsPassedOnlyWhenSet(t *testing.T) {
	if args := containerArgs(t, helmTemplate(t)); slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--logging-format") }) {
		t.Errorf("default arguments %q pass --logging-format", args)
	}
	if args := containerArgs(t, helmTemplate(t, "--set", "logging.format=json")); !slices.Contains(args, "--logging-format=json") {
		t.Errorf("arguments %q lack --logging-format=json", args)
	}
}

func TestImageIsPinnedByTagOrDigest(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, c := range []struct {
		name, set, want string
	}{
		{"the chart's appVersion by default", "", "ghcr.io/attachdetach-controller/attachdetach-controller:v0.1.0"},
		{"a tag", "image.tag=v0.2.0", "ghcr.io/attachdetach-controller/attachdetach-controller:v0.2.0"},
		{"a digest", "image.repository=registry.example.com/adc,image.digest=" + digest, "registry.example.com/adc@" + digest},
	} {
		t.Run(c.name, func(t *testing.T) {
			var args []string
			if c.set != "" {
				args = []string{"--set", c.set}
			}
			containers, _, _ := unstructured.NestedSlice(find(t, helmTemplate(t, args...), "Deployment").Object, "spec", "template", "spec", "containers")
			if got := containers[0].(map[string]any)["image"]; got != c.want {
				t.Errorf("image = %v, want %s", got, c.want)
			}
		})
	}
}

// TestMonitoringObjects: the PrometheusRule holds the groups of
// manifests/monitoring/rules.yaml, the dashboard's ConfigMap the dashboard as it is
// and the label Grafana's sidecar looks for, and the ServiceMonitor names the job
// the rules select.
func TestMonitoringObjects(t *testing.T) {
	objs := helmTemplate(t, "--set", "serviceMonitor.enabled=true,prometheusRule.enabled=true,grafanaDashboard.enabled=true,prometheusRule.labels.release=prom")

	rules, err := monitoring.ReadRules(root)
	if err != nil {
		t.Fatal(err)
	}
	rule := find(t, objs, "PrometheusRule")
	spec, err := json.Marshal(rule.Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	var got monitoring.RuleGroups
	if err := yaml.Unmarshal(spec, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rules) {
		t.Errorf("the PrometheusRule's groups differ from %s", monitoring.RulesFile)
	}
	if rule.GetLabels()["release"] != "prom" {
		t.Errorf("PrometheusRule labels %v lack prometheusRule.labels", rule.GetLabels())
	}

	dashboard, err := os.ReadFile(filepath.Join(root, monitoring.DashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	cm := find(t, objs, "ConfigMap")
	if cm.GetLabels()["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v, want grafana_dashboard: \"1\"", cm.GetLabels())
	}
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	if strings.TrimSpace(data["attachdetach-controller.json"]) != strings.TrimSpace(string(dashboard)) {
		t.Errorf("the ConfigMap's attachdetach-controller.json is not %s", monitoring.DashboardFile)
	}

	sm := find(t, objs, "ServiceMonitor")
	if job, _, _ := unstructured.NestedString(sm.Object, "spec", "jobLabel"); job != "app.kubernetes.io/name" {
		t.Errorf("ServiceMonitor jobLabel %q, want app.kubernetes.io/name, whose value attachdetach-controller is the job the rules select", job)
	}
	service := find(t, objs, "Service")
	selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	for k, v := range selector {
		if service.GetLabels()[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s, which the Service %s lacks", k, v, service.GetName())
		}
	}
}

// TestAlertsSelectTheJobGiven: prometheusRule.job replaces the job every alert
// selects, and nothing else in the rules.
func TestAlertsSelectTheJobGiven(t *testing.T) {
	objs := helmTemplate(t, "--set", "prometheusRule.enabled=true,prometheusRule.job=kube-system/adc")
	spec, err := json.Marshal(find(t, objs, "PrometheusRule").Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	original, err := os.ReadFile(filepath.Join(root, monitoring.RulesFile))
	if err != nil {
		t.Fatal(err)
	}
	var got, want monitoring.RuleGroups
	if err := yaml.Unmarshal(spec, &got); err != nil {
		t.Fatal(err)
	}
	replaced := strings.ReplaceAll(string(original), `job="attachdetach-controller"`, `job="kube-system/adc"`)
	if replaced == string(original) {
		t.Fatalf("%s names no job as job=\"attachdetach-controller\"", monitoring.RulesFile)
	}
	if err := yaml.Unmarshal([]byte(replaced), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("with prometheusRule.job=kube-system/adc the groups are not the rules with that job")
	}
	if strings.Contains(string(spec), `attachdetach-controller\"`) {
		t.Errorf("the PrometheusRule still selects job attachdetach-controller somewhere")
	}
}

// TestSchemaRefusesBadValues: helm refuses values the schema forbids before it
// renders anything, with a message that names the value and what it should be.
func TestSchemaRefusesBadValues(t *testing.T) {
	for _, c := range []struct {
		name string
		set  string
		want []string
	}{
		{"an unknown logging format", "logging.format=xml", []string{"/logging/format", "value must be one of '', 'text', 'json'"}},
		{"replicas that are no number", "replicas=two", []string{"/replicas", "got string, want integer"}},
		{"a duration without its unit", "controller.maxWaitForUnmount=600", []string{"maxWaitForUnmount", "want null or string"}},
		{"a duration Go cannot parse", "controller.maxWaitForUnmount=10min", []string{"maxWaitForUnmount", "'10min' does not match pattern"}},
		{"a misspelt key", "replica=3", []string{"additional properties 'replica' not allowed"}},
		{"no workers", "controller.workers=0", []string{"/controller/workers", "want 1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := run(t, helm, "template", release, chartDir, "--set", c.set)
			if err == nil {
				t.Fatalf("helm template --set %s succeeded", c.set)
			}
			msg := err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("helm's message lacks %q:\n%s", w, msg)
				}
			}
			t.Log(msg)
		})
	}
}

// TestNoQuotaInKubeSystem: in kube-system the chart's ResourceQuota would cap every
// pod of the priority class, not only the controller's, so helm refuses it there
// and renders without it once it is turned off.
func TestNoQuotaInKubeSystem(t *testing.T) {
	_, err := run(t, helm, "template", release, chartDir, "--namespace", "kube-system")
	if err == nil || !strings.Contains(err.Error(), "set resourceQuota.enabled=false there") {
		t.Errorf("helm template into kube-system: %v, want a refusal naming resourceQuota.enabled", err)
	}
	for _, o := range helmTemplate(t, "--namespace", "kube-system", "--set", "resourceQuota.enabled=false") {
		if o.GetKind() == "ResourceQuota" {
			t.Errorf("resourceQuota.enabled=false renders ResourceQuota %s", o.GetName())
		}
	}
}

// TestNoReplicasWithoutLeaderElection: without leader election every replica acts,
// so helm refuses more than one; shadow mode takes no Lease, so helm refuses it
// with leader election on.
func TestNoReplicasWithoutLeaderElection(t *testing.T) {
	for set, want := range map[string]string{
		"leaderElection.enabled=false": "leaderElection.enabled=false with more than one replica",
		"controller.shadow=true":       "controller.shadow=true writes nothing, not even a Lease",
	} {
		_, err := run(t, helm, "template", release, chartDir, "--set", set)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("helm template --set %s: %v, want a refusal saying %q", set, err, want)
		}
	}
	if args := containerArgs(t, helmTemplate(t, "--set", "leaderElection.enabled=false,replicas=1")); !slices.Contains(args, "--leader-elect=false") {
		t.Errorf("arguments %q lack --leader-elect=false", args)
	}
}
