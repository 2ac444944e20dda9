// Package chart tests the Helm chart in charts/attachdetach-controller without a
// cluster: helm lint accepts it, its default values render the objects of the
// kustomize base in manifests/ (but for the documented differences), its values set
// the controller's flags, its schema refuses bad values with a message naming
// them, and its copies of the alert rules and the dashboard are those of
// manifests/monitoring/. test/deploy installs it into a real API server.
package chart

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
	"github.com/attachdetach-controller/attachdetach-controller/internal/manifest"
)

// release and namespace give the chart's objects the base's names.
const (
	release   = "attachdetach-controller"
	namespace = "attachdetach-controller"
)

var (
	root, chartDir string
	helm, kubectl  string
)

func TestMain(m *testing.M) {
	if err := setUp(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func setUp(ctx context.Context) error {
	var err error
	if root, err = binaries.RepoRoot(); err != nil {
		return err
	}
	chartDir = filepath.Join(root, "charts", "attachdetach-controller")
	if helm, err = binaries.Tool(ctx, binaries.Helm); err != nil {
		return err
	}
	kubectl, err = binaries.Tool(ctx, binaries.Kubectl)
	return err
}

// run runs a command and returns its standard output; a failure carries its
// standard error.
func run(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	// helm keeps its configuration and cache out of the user's home.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), nil
}

// helmTemplate renders the chart as the release attachdetach-controller in the
// namespace attachdetach-controller, with more helm arguments such as --set.
func helmTemplate(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := run(t, helm, append([]string{"template", release, chartDir, "--namespace", namespace}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

// kustomize renders a kustomization directory with kubectl kustomize.
func kustomize(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	out, err := run(t, kubectl, "kustomize", dir)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

// decode reads a stream of YAML documents.
func decode(t *testing.T, stream string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := manifest.Decode(stream)
	if err != nil {
		t.Fatalf("reading rendered objects: %v", err)
	}
	return objs
}

// find returns the one rendered object of a kind.
func find(t *testing.T, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("rendered %d objects of kind %s, want 1", len(found), kind)
	}
	return found[0]
}

// containerArgs returns the arguments of the rendered Deployment's container.
func containerArgs(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	containers, _, err := unstructured.NestedSlice(find(t, objs, "Deployment").Object, "spec", "template", "spec", "containers")
	if err != nil || len(containers) != 1 {
		t.Fatalf("the Deployment's containers: %v, %v", containers, err)
	}
	args, _, err := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	if err != nil {
		t.Fatalf("the container's args: %v", err)
	}
	return args
}

func TestHelmLintPasses(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"default values", nil},
		{"every optional object", []string{"--set", "serviceMonitor.enabled=true,prometheusRule.enabled=true,grafanaDashboard.enabled=true,explainReader.enabled=true"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := run(t, helm, append([]string{"lint", "--strict", chartDir}, c.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(strings.TrimSpace(out))
		})
	}
}

func TestChartFilesMatchManifests(t *testing.T) {
	for _, name := range []string{"rules.yaml", "dashboard.json"} {
		canonical, err := os.ReadFile(filepath.Join(root, "manifests", "monitoring", name))
		if err != nil {
			t.Fatal(err)
		}
		copied, err := os.ReadFile(filepath.Join(chartDir, "files", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(canonical, copied) {
			t.Errorf("charts/attachdetach-controller/files/%s differs from manifests/monitoring/%s, which is the one to edit: run hack/sync-chart.sh", name, name)
		}
	}
}
