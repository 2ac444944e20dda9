package integration

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
	"github.com/attachdetach-controller/attachdetach-controller/internal/controllerproc"
	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
)

var env *suite.Env

func TestMain(m *testing.M) {
	os.Exit(suite.Main(m, suite.Options{Tools: []string{binaries.Kubectl, binaries.KubeControllerManager}}, func(e *suite.Env) { env = e }))
}

// scenario is one test's world, run by the kubelet and external-attacher
// simulators, and the controller as a child process.
type scenario struct {
	*suite.World
	ctrl *controllerproc.Controller
}

type scenarioOptions struct {
	suite.SimOptions
	controllerArgs []string
	// worldArgs adds controller arguments that name the world's driver or nodes.
	worldArgs func(*suite.World) []string
	// noController leaves starting the controller to the test.
	noController bool
	// kubeconfig, when set, is the one the controller uses instead of the admin's.
	kubeconfig string
	// env is the control plane, when not the package's.
	env *testenv.Env
}

func newScenario(t *testing.T, opts scenarioOptions) *scenario {
	t.Helper()
	e := opts.env
	if e == nil {
		e = env.Env
	}
	s := &scenario{World: suite.NewSimWorld(t, e, opts.SimOptions)}
	kubeconfig := opts.kubeconfig
	if kubeconfig == "" {
		kubeconfig = e.AdminKubeconfig
	}
	args := opts.controllerArgs
	if opts.worldArgs != nil {
		args = append(slices.Clone(args), opts.worldArgs(s.World)...)
	}
	logFile := filepath.Join(t.TempDir(), "controller.log")
	suite.KeepLogOnFailure(t, e, "controller", logFile)
	var err error
	s.ctrl, err = controllerproc.New(t.Context(), controllerproc.Options{
		Binary:     env.Controller,
		Kubeconfig: kubeconfig,
		LogFile:    logFile,
		Args:       args,
	})
	s.Must(err)
	if !opts.noController {
		s.startController()
	}
	t.Cleanup(s.cleanup)
	return s
}

// cleanup deletes the scenario's pods and waits for its VolumeAttachments to go,
// so that the next test starts from a clean cluster, and stops the controller.
func (s *scenario) cleanup() {
	if !s.ctrl.Running() {
		s.startController()
	}
	s.Drain()
	if s.T.Failed() {
		s.T.Logf("controller log tail:\n%s", s.ctrl.LogTail(60))
	}
	if err := s.ctrl.Stop(); err != nil {
		s.T.Error(err)
	}
}

// startController starts the controller process without waiting for it.
func (s *scenario) startController() {
	s.T.Helper()
	s.Must(s.ctrl.Start(context.Background()))
}

// killController stops the controller with SIGKILL: no clean-up of any kind.
func (s *scenario) killController() {
	if err := s.ctrl.Kill(); err != nil {
		s.T.Error(err)
	}
}

func countEqual(list []string, want string) int {
	n := 0
	for _, e := range list {
		if e == want {
			n++
		}
	}
	return n
}
