// Package suite is how the integration, end-to-end and deploy suites are written.
// Main runs a suite's tests on one control plane with the controller and the
// upstream tools built; a World is one test's share of that control plane: its own
// namespace, CSI driver name and nodes, where it creates volumes and pods and waits
// for the controller to attach, detach and report them. World's methods fail the
// test on an error, and Eventually and Never are the suites' only waits:
//
//	var env *suite.Env
//
//	func TestMain(m *testing.M) {
//		os.Exit(suite.Main(m, suite.Options{}, func(e *suite.Env) { env = e }))
//	}
//
//	func TestAttach(t *testing.T) {
//		w := suite.NewSimWorld(t, env.Env, suite.SimOptions{})
//		... start the controller with env.Controller and env.AdminKubeconfig ...
//		v := w.CreateVolume("data", workload.VolumeOptions{})
//		w.CreatePod("app", w.Nodes[0], v.Claim)
//		w.WaitAttached(v, w.Nodes[0])
//	}
package suite

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
	"github.com/attachdetach-controller/attachdetach-controller/internal/kubectl"
	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
)

// prepareTimeout bounds the builds; the upstream tools take many minutes the first time.
const prepareTimeout = 45 * time.Minute

// Env is what a suite's tests share: the control plane and the binaries they run.
type Env struct {
	*testenv.Env
	// Controller is the controller executable built from this repository.
	Controller string
	// tools are the paths of Options.Tools.
	tools map[string]string
}

// Tool returns the path of one of the suite's Options.Tools.
func (e *Env) Tool(name string) string {
	path, ok := e.tools[name]
	if !ok {
		panic(fmt.Sprintf("suite: tool %s is not in the suite's Options.Tools", name))
	}
	return path
}

// Kubectl returns the suite's kubectl (Options.Tools must have binaries.Kubectl) with
// the admin kubeconfig.
func (e *Env) Kubectl() kubectl.Kubectl {
	return kubectl.Kubectl{Binary: e.Tool(binaries.Kubectl), Kubeconfig: e.AdminKubeconfig}
}

// Options configures a suite.
type Options struct {
	// ControlPlane configures the suite's control plane.
	ControlPlane testenv.Options
	// Tools are the upstream tools the tests run beside kube-apiserver, such as
	// binaries.Kubectl.
	Tools []string
}

// Main builds the controller and the suite's tools, starts the control plane, hands
// the suite's Env to set, runs the tests and stops everything, keeping the control
// plane's logs when a test failed. Call it from TestMain. With -short it runs no
// test: every suite needs the control plane.
func Main(m *testing.M, opts Options, set func(*Env)) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("suite: skipped with -short: it runs a control plane and the controller")
		return 0
	}
	e := &Env{tools: map[string]string{}}
	if err := e.build(opts.Tools); err != nil {
		fmt.Fprintln(os.Stderr, "suite:", err)
		return 1
	}
	return testenv.Main(m, opts.ControlPlane, func(env *testenv.Env) {
		e.Env = env
		set(e)
	})
}

// build builds the controller and the tools, unless they are up to date.
func (e *Env) build(tools []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), prepareTimeout)
	defer cancel()
	var err error
	if e.Controller, err = binaries.Controller(ctx); err != nil {
		return err
	}
	for _, name := range tools {
		if e.tools[name], err = binaries.Tool(ctx, name); err != nil {
			return err
		}
	}
	return nil
}
