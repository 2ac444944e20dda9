package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
)

// Versions of the upstream binaries hack/build-tools.sh builds.
const (
	KubernetesVersion       = "v1.37.1"
	ExternalAttacherVersion = "v4.13.0"
)

// buildScript is the repository-relative path of the script that builds and caches
// upstream binaries.
const buildScript = "hack/build-tools.sh"

var toolPaths sync.Map // tool name -> absolute path

// Tool returns the path of an upstream binary (kube-apiserver,
// kube-controller-manager, kubectl or csi-attacher), building it on first use through
// hack/build-tools.sh, which caches it outside the repository.
func Tool(ctx context.Context, name string) (string, error) {
	file := name + "-" + KubernetesVersion
	if name == "csi-attacher" {
		file = name + "-" + ExternalAttacherVersion
	}
	if p, ok := toolPaths.Load(file); ok {
		return p.(string), nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	unlock, err := lockBuilds()
	if err != nil {
		return "", err
	}
	defer unlock()

	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, buildScript), name)
	cmd.Dir = root
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building %s with %s: %w\n%s", name, buildScript, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	binDir := strings.TrimSpace(lines[len(lines)-1])
	path := filepath.Join(binDir, file)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s did not produce %s: %w", buildScript, path, err)
	}
	toolPaths.Store(file, path)
	return path, nil
}

// lockBuilds serialises build-tools.sh runs of concurrent test binaries on one machine,
// so two of them never build the same binary into the same temporary file.
func lockBuilds() (func(), error) {
	path := filepath.Join(os.TempDir(), "attachdetach-controller-build-tools.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening build lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("taking build lock %s: %w", path, err)
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
