// Package binaries finds, and builds on first use, the executables the suites, the
// local demo and the benchmark run: the upstream tools whose versions
// hack/tools/versions pins, built and cached by hack/build-tools.sh, and the
// attachdetach-controller built from this repository. Both are cached outside the
// repository and outside the temporary directory, under the user's cache directory
// ($XDG_CACHE_HOME or ~/.cache)/attachdetach-controller; builds by concurrent
// processes take turns.
package binaries

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
)

// The upstream tools Tool knows.
const (
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	Kubectl               = "kubectl"
	CSIAttacher           = "csi-attacher"
	Promtool              = "promtool"
	// HollowKubelet is hack/tools/hollow-kubelet: the real kubelet of
	// KUBERNETES_VERSION with a fake container runtime and mounter.
	HollowKubelet = "hollow-kubelet"
	// Helm is helm, which packages, lints and renders charts/attachdetach-controller.
	Helm = "helm"
)

const (
	// buildScript builds and caches the upstream tools.
	buildScript = "hack/build-tools.sh"
	// versionsFile pins the upstream tools' versions.
	versionsFile = "hack/tools/versions"
	// controllerPackage is the controller's main package.
	controllerPackage = "./cmd/attachdetach-controller"
	// versionPackage holds the variables the linker sets to name the build.
	versionPackage = "github.com/attachdetach-controller/attachdetach-controller/pkg/version"
)

// Versions are the pinned versions of the upstream tools.
type Versions struct {
	// Kubernetes is the version of kube-apiserver, kube-controller-manager and kubectl.
	Kubernetes string
	// ExternalAttacher is the version of csi-attacher.
	ExternalAttacher string
	// Prometheus is the version of the github.com/prometheus/prometheus module
	// promtool is built from.
	Prometheus string
}

// ReadVersions reads the versions hack/tools/versions pins.
var ReadVersions = sync.OnceValues(func() (Versions, error) {
	root, err := RepoRoot()
	if err != nil {
		return Versions{}, err
	}
	path := filepath.Join(root, versionsFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return Versions{}, fmt.Errorf("reading the tool versions: %w", err)
	}
	vars := map[string]string{}
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if name, value, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			vars[name] = value
		}
	}
	v := Versions{Kubernetes: vars["KUBERNETES_VERSION"], ExternalAttacher: vars["EXTERNAL_ATTACHER_VERSION"], Prometheus: vars["PROMETHEUS_VERSION"]}
	if v.Kubernetes == "" || v.ExternalAttacher == "" || v.Prometheus == "" {
		return Versions{}, fmt.Errorf("%s must set KUBERNETES_VERSION, EXTERNAL_ATTACHER_VERSION and PROMETHEUS_VERSION", path)
	}
	return v, nil
})

// toolPaths caches Tool's answers: tool name -> absolute path.
var toolPaths sync.Map

// Tool returns the path of an upstream tool (KubeAPIServer, KubeControllerManager,
// Kubectl, CSIAttacher, Promtool, HollowKubelet or Helm) at its pinned version, building it
// on first use through hack/build-tools.sh, whose progress (each tool as its build
// starts and ends, with the time it took) goes to standard error.
func Tool(ctx context.Context, name string) (string, error) {
	if p, ok := toolPaths.Load(name); ok {
		return p.(string), nil
	}
	root, cache, err := dirs()
	if err != nil {
		return "", err
	}
	unlock, err := lock(filepath.Join(cache, "tools.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, buildScript), name)
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building %s with %s: %w", name, buildScript, err)
	}
	// The script prints the path of each tool it was asked for, one a line.
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	path := strings.TrimSpace(lines[len(lines)-1])
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s did not produce %s: %w", buildScript, path, err)
	}
	toolPaths.Store(name, path)
	return path, nil
}

// Controller builds ./cmd/attachdetach-controller of this repository and returns the
// path of the executable. It is kept in the cache, in a directory of its own for each
// checkout of the repository, so that checkouts side by side never run each other's
// controller; go build leaves an up-to-date executable alone, so a later call costs a
// fraction of a second. The executable reports the checkout's commit (see
// pkg/version), so that hack/run.sh's controller says what it runs.
func Controller(ctx context.Context) (string, error) {
	root, cache, err := dirs()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(cache, "bin", hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating %s: %w", dir, err)
	}
	unlock, err := lock(filepath.Join(dir, "build.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	bin := filepath.Join(dir, "attachdetach-controller")
	args := []string{"build", "-o", bin}
	if commit, ok := headCommit(ctx, root); ok {
		args = append(args, "-ldflags", "-X "+versionPackage+".GitCommit="+commit)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, controllerPackage)...)
	cmd.Dir = root
	// Static, as the image and the release build it: with cgo, the Go plugin
	// loader that k8s.io/cli-runtime links through kustomize keeps every exported
	// method, and the binary is 2.5 times as large and slower to link.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the controller: %w\n%s", err, out)
	}
	return bin, nil
}

// headCommit returns the commit checked out in root, false where git cannot tell
// (no git, or a copy of the sources without .git): the binary then reports what Go
// stamped into it, or "unknown".
func headCommit(ctx context.Context, root string) (string, bool) {
	cmd := exec.CommandContext(ctx, "git", "rev-parse", "HEAD")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(out)), true
}

// dirs returns the repository's root and the cache,
// $XDG_CACHE_HOME/attachdetach-controller (~/.cache by default), creating it.
func dirs() (root, cache string, err error) {
	if root, err = RepoRoot(); err != nil {
		return "", "", err
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", "", fmt.Errorf("finding the cache directory: %w", err)
	}
	cache = filepath.Join(base, "attachdetach-controller")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", "", fmt.Errorf("creating the cache directory: %w", err)
	}
	return root, cache, nil
}

// lock takes an exclusive lock on the file at path, creating it, and returns its
// release. It waits while another process holds the lock.
func lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("taking lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// RepoRoot returns the root of this repository: the directory that holds
// hack/build-tools.sh, found from this package's source location or, when the
// binary was built without usable source paths, from the working directory's module.
func RepoRoot() (string, error) {
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	if out, err := exec.Command("go", "env", "GOMOD").Output(); err == nil {
		if mod := strings.TrimSpace(string(out)); mod != "" && mod != os.DevNull {
			starts = append(starts, filepath.Dir(mod))
		}
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, dir := range starts {
		for {
			if _, err := os.Stat(filepath.Join(dir, buildScript)); err == nil {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("cannot find the repository root (a directory holding %s) from %v", buildScript, starts)
}
