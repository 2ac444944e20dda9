// Package e2e runs the attachdetach-controller binary end to end on a real
// kube-apiserver with the real CSI external-attacher (csi-attacher) and the project's
// CSI test driver: attach and detach go through real ControllerPublishVolume and
// ControllerUnpublishVolume calls. Each test brings up its own driver, csi-attacher,
// kubelet stand-in and controller with internal/localcluster, the same code as
// hack/run.sh, on one control plane for the package.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/internal/localcluster"
	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
)

var (
	env *testenv.Env
	// controllerBinary is the controller built from this repository.
	controllerBinary string
	// kubectl is the kubectl built by hack/build-tools.sh.
	kubectl string
)

// prepareTimeout bounds the builds; the upstream tools take minutes the first time.
const prepareTimeout = 30 * time.Minute

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	if err := prepare(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	os.Exit(testenv.Main(m, testenv.Options{}, func(e *testenv.Env) { env = e }))
}

// prepare builds the controller and the upstream tools the tests run.
func prepare() error {
	ctx, cancel := context.WithTimeout(context.Background(), prepareTimeout)
	defer cancel()
	var err error
	if controllerBinary, err = localcluster.BuildController(ctx); err != nil {
		return err
	}
	if _, err = testenv.Tool(ctx, "csi-attacher"); err != nil {
		return err
	}
	kubectl, err = testenv.Tool(ctx, "kubectl")
	return err
}
