package deploy

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

// TestHelmChartInstallsAndLeads installs the chart with helm, as the release adc in
// a namespace of its own (the base's objects hold the default names), then runs two
// replicas as the chart's ServiceAccount with the arguments of the Deployment helm
// created: one takes the Lease the arguments name, the other stands by, the leader
// attaches and detaches a volume, and the API server refuses neither anything.
func TestHelmChartInstallsAndLeads(t *testing.T) {
	const (
		release   = "adc"
		namespace = "chart-install"
		// The chart's objects are named after the release.
		fullname = release + "-attachdetach-controller"
		// The Lease's name when the values do not set one: the controller's default.
		lease = "attachdetach-controller"
	)
	helmInstall(t, release, namespace)
	deployment, err := env.Client.AppsV1().Deployments(namespace).Get(t.Context(), fullname, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Deployment helm installed: %v", err)
	}
	args := containerArgs(t, deployment.Spec.Template.Spec.Containers[0], namespace)
	account := deployment.Spec.Template.Spec.ServiceAccountName
	if account != fullname {
		t.Errorf("the Deployment runs as %q, want %q", account, fullname)
	}

	w := suite.NewSimWorld(t, env.Env, suite.SimOptions{Nodes: 1})
	opts := replicaOptions{namespace: namespace, account: account, args: args}
	a := startReplica(t, "chart-a", opts)
	suite.WaitLeader(t, env.Client, a.ctrl, namespace, lease, operationTimeout)
	b := startReplica(t, "chart-b", opts)
	b.waitStandby()

	v := w.CreateVolume("chart-data", workload.VolumeOptions{})
	w.CreatePod("chart-pod", w.Nodes[0], v.Claim)
	waitAttachedOnlyTo(w, v, w.Nodes[0], operationTimeout)
	w.DeletePod("chart-pod")
	waitDetachedEverywhere(w, v, operationTimeout)
	b.terminate()
	a.terminate()
	checkNoRefusals(t, []*replica{a, b})
}

// helmInstall packages the chart as hack/release.sh does and installs (or
// upgrades) that package with its default values as a cluster admin would,
// creating the namespace, and waits for nothing: no pod of it runs in the test's
// control plane.
func helmInstall(t *testing.T, release, namespace string) {
	t.Helper()
	home, packaged := t.TempDir(), t.TempDir()
	helm(t, home, "package", chart, "--destination", packaged)
	archives, err := filepath.Glob(filepath.Join(packaged, "*.tgz"))
	if err != nil || len(archives) != 1 {
		t.Fatalf("helm package wrote %v (%v), want one chart archive", archives, err)
	}
	out := helm(t, home, "upgrade", "--install", release, archives[0],
		"--namespace", namespace, "--create-namespace", "--kubeconfig", env.AdminKubeconfig)
	t.Logf("helm upgrade --install %s %s: %s", release, filepath.Base(archives[0]), out)
}

// helm runs the cached helm with its configuration, cache and data in home.
func helm(t *testing.T, home string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), env.Tool(binaries.Helm), args...)
	cmd.Env = append(cmd.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return strings.TrimSpace(out.String())
}
