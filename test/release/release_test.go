// Package release runs hack/release.sh for a test version into a temporary
// directory, pushing nothing, and checks every artifact it promises: the controller
// binary reports the version and commit, the plugin archive holds the plugin and
// the LICENSE, install.yaml pins the image to the version, the chart carries the
// version, the krew manifest gets the archive's sum, and sha256sums.txt matches.
package release

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
	"github.com/attachdetach-controller/attachdetach-controller/internal/manifest"
)

const (
	// completion is kubectl's completion hook for the plugin, in plugins/.
	completion   = "kubectl_complete-attachdetach"
	version      = "v0.1.0-test.1"
	chartVersion = "0.1.0-test.1"
	// defaultPlatforms is what the test builds unless RELEASE_PLATFORMS says more:
	// each further platform compiles the controller's dependencies once more.
	defaultPlatforms = "linux/amd64"
)

// krewTemplate is a krew manifest template with the placeholders release.sh fills.
const krewTemplate = `apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: attachdetach
spec:
  version: {{VERSION}}
  platforms:
    - uri: https://example.com/{{VERSION}}/kubectl-attachdetach_{{VERSION}}_linux_amd64.tar.gz
      sha256: {{SHA256_linux_amd64}}
`

func TestReleaseBuildsEveryArtifact(t *testing.T) {
	root, err := binaries.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	platforms := os.Getenv("RELEASE_PLATFORMS")
	if platforms == "" {
		platforms = defaultPlatforms
	}
	out := t.TempDir()
	template := filepath.Join(t.TempDir(), "attachdetach.yaml")
	if err := os.WriteFile(template, []byte(krewTemplate), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "bash", filepath.Join(root, "hack", "release.sh"), version, out)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "RELEASE_PLATFORMS="+platforms, "KREW_TEMPLATE="+template)
	began := time.Now()
	output, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/release.sh: %v\n%s", err, output)
	}
	t.Logf("hack/release.sh %s for %s took %s:\n%s", version, platforms, time.Since(began).Round(time.Second), output)

	sums := checkSums(t, out)
	for _, p := range strings.Fields(platforms) {
		goos, goarch, _ := strings.Cut(p, "/")
		if goos == "linux" {
			checkBinary(t, root, filepath.Join(out, "attachdetach-controller_"+version+"_linux_"+goarch))
		}
		archive := "kubectl-attachdetach_" + version + "_" + goos + "_" + goarch
		if goos == "windows" {
			archive += ".zip"
			mustExist(t, filepath.Join(out, archive))
		} else {
			archive += ".tar.gz"
			checkPluginArchive(t, root, filepath.Join(out, archive))
		}
		if _, ok := sums[archive]; !ok {
			t.Errorf("sha256sums.txt lacks %s", archive)
		}
	}
	checkInstallYAML(t, filepath.Join(out, "install.yaml"))
	checkChart(t, filepath.Join(out, "attachdetach-controller-"+chartVersion+".tgz"))
	if strings.Contains(platforms, "linux/amd64") {
		krew, err := os.ReadFile(filepath.Join(out, "attachdetach.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		archive := "kubectl-attachdetach_" + version + "_linux_amd64.tar.gz"
		want := "sha256: " + sums[archive]
		if !strings.Contains(string(krew), want) || !strings.Contains(string(krew), "version: "+version) {
			t.Errorf("the krew manifest lacks %q or the version:\n%s", want, krew)
		}
	}
	// Without docker buildx, release.sh says it skips the image.
	if !strings.Contains(string(output), "no image tarball") {
		mustExist(t, filepath.Join(out, "attachdetach-controller_"+version+"_image.oci.tar"))
	}
}

func mustExist(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Errorf("missing artifact: %v", err)
	}
}

// checkSums checks sha256sums.txt lists every other file of the directory with its
// sum, and returns the sums by file name.
func checkSums(t *testing.T, dir string) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "sha256sums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums := map[string]string{}
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		sum, name, ok := strings.Cut(scanner.Text(), "  ")
		if !ok {
			t.Fatalf("sha256sums.txt line %q is not SUM  NAME", scanner.Text())
		}
		name = strings.TrimPrefix(name, "./")
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		got := sha256.Sum256(data)
		if hex.EncodeToString(got[:]) != sum {
			t.Errorf("sha256sums.txt says %s for %s, the file has %x", sum, name, got)
		}
		sums[name] = sum
	}
	if err := scanner.Err(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := sums[e.Name()]; !ok && e.Name() != "sha256sums.txt" {
			t.Errorf("sha256sums.txt lacks %s", e.Name())
		}
	}
	return sums
}

// checkBinary runs the controller binary's --version: it names the release and
// the commit checked out.
func checkBinary(t *testing.T, root, path string) {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), path, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", path, err)
	}
	head, err := exec.CommandContext(t.Context(), "git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"attachdetach-controller " + version + " ", "commit " + strings.TrimSpace(string(head))} {
		if !strings.Contains(string(out), want) {
			t.Errorf("%s --version = %q, want %q in it", filepath.Base(path), out, want)
		}
	}
}

// checkPluginArchive checks the archive holds exactly the plugin, executable, the
// LICENSE, and kubectl's completion hook where the repository has one.
func checkPluginArchive(t *testing.T, root, path string) {
	t.Helper()
	want := []string{"LICENSE", "kubectl-attachdetach"}
	if _, err := os.Stat(filepath.Join(root, "plugins", completion)); err == nil {
		want = append(want, completion)
	}
	slices.Sort(want)
	files := tarFiles(t, path)
	var names []string
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Errorf("%s holds %v, want %v", filepath.Base(path), names, want)
	}
	if f, ok := files["kubectl-attachdetach"]; ok && f.mode&0o111 == 0 {
		t.Errorf("kubectl-attachdetach in %s is not executable: mode %o", filepath.Base(path), f.mode)
	}
}

// tarFile is a file of an archive.
type tarFile struct {
	mode int64
	data []byte
}

// tarFiles reads the files of a .tar.gz, by name.
func tarFiles(t *testing.T, path string) map[string]tarFile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	r := tar.NewReader(gz)
	files := map[string]tarFile{}
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		data, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		files[h.Name] = tarFile{mode: h.Mode, data: data}
	}
}

// checkInstallYAML checks install.yaml renders the base with the image at the
// release's version.
func checkInstallYAML(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifest.Decode(string(data))
	if err != nil {
		t.Fatalf("install.yaml: %v", err)
	}
	var kinds []string
	for _, obj := range objs {
		kinds = append(kinds, obj.GetKind())
		if obj.GetKind() != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &d); err != nil {
			t.Fatal(err)
		}
		if image := d.Spec.Template.Spec.Containers[0].Image; image != "ghcr.io/attachdetach-controller/attachdetach-controller:"+version {
			t.Errorf("install.yaml's image is %s, want the release's version %s", image, version)
		}
	}
	for _, want := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment", "PodDisruptionBudget", "Service"} {
		if !slices.Contains(kinds, want) {
			t.Errorf("install.yaml has no %s (it has %v)", want, kinds)
		}
	}
}

// checkChart checks the packaged chart carries the release's version.
func checkChart(t *testing.T, path string) {
	t.Helper()
	f, ok := tarFiles(t, path)["attachdetach-controller/Chart.yaml"]
	if !ok {
		t.Fatalf("%s holds no attachdetach-controller/Chart.yaml", filepath.Base(path))
	}
	var meta struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := sigsyaml.Unmarshal(f.data, &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Version != chartVersion || meta.AppVersion != version {
		t.Errorf("the packaged chart has version %q and appVersion %q, want %q and %q", meta.Version, meta.AppVersion, chartVersion, version)
	}
}
