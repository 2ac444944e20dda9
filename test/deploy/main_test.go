// Package deploy tests that the controller is deployable in a cluster: the manifests
// in manifests/ are accepted by a real kube-apiserver, the RBAC they grant is exactly
// what the controller needs, and two replicas hand over the leader Lease safely; the
// explain-reader component lets a user who is no admin run explain; the Helm chart
// installs with helm, and its replicas elect a leader and work as the base's do.
//
// All tests share one control plane. The controller runs as a child process under
// the identity of the manifests' ServiceAccount; the API server's audit log records
// its requests, each tagged with the token it used, so every request is traced back
// to the replica that made it. explain's requests are recorded the same way.
package deploy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
)

// The names manifests/ gives the controller's namespace and ServiceAccount.
const (
	controllerNamespace = "attachdetach-controller"
	controllerAccount   = "attachdetach-controller"
)

var (
	env *suite.Env
	// manifests is the path of manifests/.
	manifests string
	// chart is the path of the Helm chart, charts/attachdetach-controller.
	chart string
	// clientCA signs the client certificates the API server accepts.
	clientCA *certAuthority
)

func TestMain(m *testing.M) {
	root, err := binaries.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploy:", err)
		os.Exit(1)
	}
	manifests = filepath.Join(root, "manifests")
	chart = filepath.Join(root, "charts", "attachdetach-controller")
	clientCAFile, cleanup, err := writeClientCA()
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploy:", err)
		os.Exit(1)
	}
	opts := suite.Options{
		ControlPlane: testenv.Options{
			AuditUsers:     []string{testenv.ServiceAccountUser(controllerNamespace, controllerAccount), explainUser},
			APIServerFlags: []string{"--client-ca-file=" + clientCAFile},
		},
		Tools: []string{binaries.Kubectl, binaries.Helm},
	}
	code := suite.Main(m, opts, func(e *suite.Env) { env = e })
	cleanup()
	os.Exit(code)
}

// writeClientCA makes clientCA and writes its certificate for the API server;
// cleanup removes the file.
func writeClientCA() (path string, cleanup func(), err error) {
	if clientCA, err = newCertAuthority("deploy-test-client-ca"); err != nil {
		return "", nil, err
	}
	dir, err := testenv.TempDir("deploy-client-ca")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { _ = os.RemoveAll(dir) }
	if path, err = clientCA.writeCert(dir); err != nil {
		cleanup()
		return "", nil, err
	}
	return path, cleanup, nil
}

// kubectl runs kubectl as the cluster admin and returns its standard output and
// standard error.
func kubectl(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	return env.Kubectl().Run(ctx, "", args...)
}
