// Package e2e runs the attachdetach-controller binary end to end on a real
// kube-apiserver with the real CSI external-attacher (csi-attacher) and the project's
// CSI test driver: attach and detach go through real ControllerPublishVolume and
// ControllerUnpublishVolume calls. Each test brings up its own driver, csi-attacher,
// nodes and controller with internal/localcluster, the same code as hack/run.sh, on
// one control plane for the package. The nodes are the kubelet stand-in or, in the
// cases that ask for hollow nodes (kubelet_test.go), the real kubelet of the pinned
// Kubernetes (hack/tools/hollow-kubelet) with a fake container runtime and mounter,
// which stages and publishes every volume through the driver's Node service and runs
// the pods; the invariant checker watches those cases.
package e2e

import (
	"os"
	"testing"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
)

var env *suite.Env

func TestMain(m *testing.M) {
	opts := suite.Options{Tools: []string{binaries.CSIAttacher, binaries.Kubectl, binaries.HollowKubelet, binaries.KubeControllerManager}}
	os.Exit(suite.Main(m, opts, func(e *suite.Env) { env = e }))
}
