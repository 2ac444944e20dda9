package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
	"github.com/attachdetach-controller/attachdetach-controller/internal/controllerproc"
	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
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

// kcmTouchPeriod is how often kcmEventually touches the world's claims.
const kcmTouchPeriod = 3 * time.Second

// kcmEventually waits for cond, a step kube-controller-manager's attach/detach loop
// takes. That loop drops a pod whose claim or PersistentVolume its informers have
// not delivered yet, and looks at the pod again only when the claim changes or when
// its populator lists every pod again, 3 minutes later; so while it waits,
// kcmEventually touches the world's claims (an annotation) every kcmTouchPeriod.
func (s *scenario) kcmEventually(what string, cond func() bool) {
	s.T.Helper()
	last := time.Now()
	s.Eventually(what, func() bool {
		if cond() {
			return true
		}
		if time.Since(last) >= kcmTouchPeriod {
			last = time.Now()
			s.T.Logf("touching the claims: still waiting for %s", what)
			s.touchClaims()
		}
		return false
	})
}

// touchClaims writes an annotation with the time on each of the world's claims.
func (s *scenario) touchClaims() {
	s.T.Helper()
	claims := s.Client.CoreV1().PersistentVolumeClaims(s.Namespace)
	list, err := claims.List(s.T.Context(), metav1.ListOptions{})
	s.Must(err)
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, touchedAnnotation, time.Now().Format(time.RFC3339Nano))
	for _, pvc := range list.Items {
		if _, err := claims.Patch(s.T.Context(), pvc.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			s.T.Fatalf("touching claim %s: %v", pvc.Name, err)
		}
	}
}

// touchedAnnotation is the annotation touchClaims writes.
const touchedAnnotation = "test.attachdetach-controller.io/touched"

// kcmAttachedVolume is AttachedVolume for a world whose volumes
// kube-controller-manager attaches.
func (s *scenario) kcmAttachedVolume(claim, pod, node string) workload.Volume {
	s.T.Helper()
	v := s.VolumeInPod(claim, pod, node)
	s.kcmWaitAttached(v, node)
	return v
}

// kcmWaitAttached is WaitAttached for a volume kube-controller-manager attaches.
func (s *scenario) kcmWaitAttached(v workload.Volume, node string) {
	s.T.Helper()
	s.kcmEventually(fmt.Sprintf("%s in the volumesAttached of %s", v.PV, node), func() bool { return s.InNodeStatus(node, v) })
}
