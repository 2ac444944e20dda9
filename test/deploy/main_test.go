// Package deploy tests that the controller is deployable in a cluster: the manifests
// in manifests/ are accepted by a real kube-apiserver, the RBAC they grant is exactly
// what the controller needs, and two replicas hand over the leader Lease safely.
//
// All tests share one control plane. The controller runs as a subprocess under the
// identity of the manifests' ServiceAccount; the API server's audit log records its
// requests, each tagged with the token it used, so every request is traced back to
// the replica that made it.
package deploy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
)

// The names manifests/ gives the controller's namespace and ServiceAccount.
const (
	controllerNamespace = "attachdetach-controller"
	controllerAccount   = "attachdetach-controller"
)

var (
	env *testenv.Env
	// repoRoot is the repository root, where manifests/ is.
	repoRoot string
	// controllerBin and kubectlBin are the binaries the tests run.
	controllerBin, kubectlBin string
	// adminKubeconfig is a kubeconfig for the cluster admin, for kubectl.
	adminKubeconfig string
)

func TestMain(m *testing.M) {
	opts := testenv.Options{AuditUsers: []string{testenv.ServiceAccountUser(controllerNamespace, controllerAccount)}}
	os.Exit(testenv.Main(m, opts, func(e *testenv.Env) {
		env = e
		if err := setUp(); err != nil {
			fmt.Fprintln(os.Stderr, "deploy:", err)
			env.Stop()
			os.Exit(1)
		}
	}))
}

// setUp finds the repository, builds the controller, finds kubectl and writes the
// admin kubeconfig, all into the control plane's directory.
func setUp() error {
	var err error
	if repoRoot, err = testenv.RepoRoot(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if kubectlBin, err = testenv.Tool(ctx, "kubectl"); err != nil {
		return err
	}
	controllerBin = filepath.Join(env.Dir, "attachdetach-controller")
	build := exec.CommandContext(ctx, "go", "build", "-o", controllerBin, "./cmd/attachdetach-controller")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building the controller: %w\n%s", err, out)
	}
	adminKubeconfig = filepath.Join(env.Dir, "admin.kubeconfig")
	return env.WriteAdminKubeconfig(adminKubeconfig)
}

// kubectl runs kubectl as the cluster admin in the repository root and returns its
// standard output and standard error.
func kubectl(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	return kubectlWithInput(ctx, "", args...)
}

// kubectlWithInput is kubectl with stdin read from input.
func kubectlWithInput(ctx context.Context, input string, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, kubectlBin, append([]string{"--kubeconfig=" + adminKubeconfig}, args...)...)
	cmd.Dir = repoRoot
	cmd.Stdin = strings.NewReader(input)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), errOut.String(), fmt.Errorf("kubectl %v: %w\n%s", args, err, errOut.String())
	}
	return out.String(), errOut.String(), nil
}
