package binaries

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// testOnlyModules are modules only the tests and the local demo use: for the CSI
// test driver and its registration with kubelet, the PromQL parser that checks the
// alerting rules and the dashboard, the benchmark's charts, the envelope's reading
// of labelled CPU profiles, and the kubelet's port-forward server that test/deploy
// stands in for a node with. The controller must
// not link them. google.golang.org/grpc is not among them: k8s.io/apiserver's
// delegating authenticator and authorizer, behind the HTTPS endpoint, link it
// through the API server's egress selector (konnectivity), which the controller
// never configures (docs/development.md).
var testOnlyModules = []string{"github.com/container-storage-interface/spec", "k8s.io/kubelet", "github.com/prometheus/prometheus", "gonum.org/v1/plot", "github.com/google/pprof", "k8s.io/cri-streaming"}

func TestControllerLinksNoTestOnlyModule(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", controllerPackage)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", controllerPackage, err)
	}
	linked := strings.Fields(string(out))
	for _, module := range testOnlyModules {
		if slices.Contains(linked, module) {
			t.Errorf("%s links %s, which only the tests may use", controllerPackage, module)
		}
	}
}

func TestReadVersions(t *testing.T) {
	v, err := ReadVersions()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v.Kubernetes, "v1.") || !strings.HasPrefix(v.ExternalAttacher, "v") || !strings.HasPrefix(v.Prometheus, "v0.") {
		t.Errorf("versions %+v, want a Kubernetes v1.x, an external-attacher and a Prometheus module version", v)
	}
}

// TestPromQLParserIsPromtools: the tests parse PromQL with the version of the
// Prometheus module promtool is built from.
func TestPromQLParserIsPromtools(t *testing.T) {
	v, err := ReadVersions()
	if err != nil {
		t.Fatal(err)
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/prometheus/prometheus")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m github.com/prometheus/prometheus: %v", err)
	}
	if got := strings.TrimSpace(string(out)); got != v.Prometheus {
		t.Errorf("go.mod requires github.com/prometheus/prometheus %s, hack/tools/versions pins %s", got, v.Prometheus)
	}
}

// TestControllerReportsTheCheckoutsCommit: the controller the suites and hack/run.sh
// run says which commit it was built from.
func TestControllerReportsTheCheckoutsCommit(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	head, ok := headCommit(t.Context(), root)
	if !ok {
		t.Skip("git cannot tell the commit of this copy of the sources")
	}
	bin, err := Controller(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), bin, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", bin, err)
	}
	if !strings.Contains(string(out), "commit "+head) {
		t.Errorf("%s --version = %q, want the commit %s in it", bin, out, head)
	}
}
