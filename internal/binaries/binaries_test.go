package binaries

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// testOnlyModules are modules only the tests and the local demo use, for the CSI
// test driver: the controller must not link them.
var testOnlyModules = []string{"google.golang.org/grpc", "github.com/container-storage-interface/spec", "k8s.io/kubelet"}

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
	if !strings.HasPrefix(v.Kubernetes, "v1.") || !strings.HasPrefix(v.ExternalAttacher, "v") {
		t.Errorf("versions %+v, want a Kubernetes v1.x and an external-attacher version", v)
	}
}
