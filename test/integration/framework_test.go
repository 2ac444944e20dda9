package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/attachdetach-controller/attachdetach-controller/internal/proc"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/csivolume"
)

var (
	env            *testenv.Env
	controllerPath string
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{}, func(e *testenv.Env) {
		env = e
		bin, err := buildController()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		controllerPath = bin
	}))
}

// buildController builds the command under test once for the package.
func buildController() (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "adc-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "attachdetach-controller")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/attachdetach-controller")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the controller: %v\n%s", err, out)
	}
	return bin, nil
}

const (
	waitTimeout = 30 * time.Second
	pollEvery   = 50 * time.Millisecond
)

// scenario is one test's world: a namespace, a CSI driver name, nodes run by the
// kubelet simulator, the external-attacher simulator, and the controller process.
type scenario struct {
	t        *testing.T
	ctx      context.Context
	client   kubernetes.Interface
	ns       string
	driver   string
	nodes    []string
	kubelet  *sim.Kubelet
	attacher *sim.Attacher
	ctrl     *proc.Process
	ctrlArgs []string
}

type scenarioOptions struct {
	nodes          int
	controllerArgs []string
	// noController leaves starting the controller to the test.
	noController bool
	// kubeconfig, when set, is the one the controller uses instead of the admin's.
	kubeconfig   string
	attachDelay  time.Duration
	unmountDelay time.Duration
	// env is the control plane, when not the package's.
	env *testenv.Env
}

func newScenario(t *testing.T, opts scenarioOptions) *scenario {
	t.Helper()
	if opts.nodes == 0 {
		opts.nodes = 2
	}
	e := opts.env
	if e == nil {
		e = env
	}
	ctx, cancel := context.WithCancel(context.Background())
	id := rand.String(5)
	s := &scenario{
		t:      t,
		ctx:    ctx,
		client: e.Client,
		ns:     "t-" + id,
		driver: "csi-" + id + ".example.com",
	}
	for i := range opts.nodes {
		s.nodes = append(s.nodes, fmt.Sprintf("node-%s-%c", id, 'a'+i))
	}
	s.must(createObject(ctx, func() error {
		_, err := s.client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}, metav1.CreateOptions{})
		return err
	}))
	var err error
	s.kubelet, err = sim.StartKubelet(ctx, e.AdminConfig(), sim.KubeletOptions{
		Nodes: s.nodes, CreateNodes: true, ManagePods: true, UnmountDelay: opts.unmountDelay,
	})
	s.must(err)
	s.attacher, err = sim.StartAttacher(ctx, e.AdminConfig(), sim.AttacherOptions{Drivers: []string{s.driver}, AttachDelay: opts.attachDelay})
	s.must(err)
	s.ctrlArgs = opts.controllerArgs
	kubeconfig := opts.kubeconfig
	if kubeconfig == "" {
		kubeconfig = filepath.Join(t.TempDir(), "admin.kubeconfig")
		s.must(e.WriteAdminKubeconfig(kubeconfig))
	}
	s.ctrlArgs = append([]string{"--kubeconfig=" + kubeconfig}, s.ctrlArgs...)
	if !opts.noController {
		s.startController()
	}
	t.Cleanup(func() {
		s.cleanup()
		cancel()
	})
	return s
}

func (s *scenario) must(err error) {
	s.t.Helper()
	if err != nil {
		s.t.Fatal(err)
	}
}

// cleanup deletes the scenario's pods and waits for its VolumeAttachments to go,
// so that the next test starts from a clean cluster.
func (s *scenario) cleanup() {
	if s.ctrl == nil {
		s.startController()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_ = s.client.CoreV1().Pods(s.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		return len(s.attachments()) == 0, nil
	})
	if err != nil {
		s.t.Errorf("cleanup: VolumeAttachments of the test still exist: %v", s.attachments())
	}
	if s.t.Failed() && s.ctrl != nil {
		s.t.Logf("controller log tail:\n%s", s.ctrl.LogTail(60))
	}
	if s.ctrl != nil {
		if err := s.ctrl.Stop(10 * time.Second); err != nil {
			s.t.Error(err)
		}
	}
}

// startController starts the controller binary as a child process.
func (s *scenario) startController(extra ...string) {
	s.t.Helper()
	args := append([]string{"--bind-address=", "--leader-elect=false", "-v=4"}, s.ctrlArgs...)
	args = append(args, extra...)
	logPath := filepath.Join(s.t.TempDir(), fmt.Sprintf("controller-%d.log", time.Now().UnixNano()))
	p, err := proc.Start("the controller", logPath, controllerPath, args...)
	s.must(err)
	s.ctrl = p
}

// killController stops the controller with SIGKILL: no clean-up of any kind.
func (s *scenario) killController() {
	if err := s.ctrl.Kill(); err != nil {
		s.t.Error(err)
	}
}

func createObject(_ context.Context, create func() error) error {
	if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// volume is a PV of the scenario's driver and its bound claim.
type volume struct {
	pv, claim, handle string
	unique            csivolume.UniqueName
}

type volumeOptions struct {
	modes []v1.PersistentVolumeAccessMode
	// handle overrides the volume handle (default: the PV name).
	handle string
	// claimUID overrides the uid in the PV's claimRef.
	claimUID string
	// noPV creates only the claim, bound to a PV that does not exist yet.
	noPV bool
}

// createVolume creates a claim and a PV of the scenario's driver bound to it.
func (s *scenario) createVolume(name string, o volumeOptions) volume {
	s.t.Helper()
	if o.modes == nil {
		o.modes = []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}
	}
	pvName := s.ns + "-" + name
	if o.handle == "" {
		o.handle = pvName
	}
	claim := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes: o.modes,
			VolumeName:  pvName,
			Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	created, err := s.client.CoreV1().PersistentVolumeClaims(s.ns).Create(s.ctx, claim, metav1.CreateOptions{})
	s.must(err)
	created.Status.Phase = v1.ClaimBound
	_, err = s.client.CoreV1().PersistentVolumeClaims(s.ns).UpdateStatus(s.ctx, created, metav1.UpdateOptions{})
	s.must(err)
	uid := string(created.UID)
	if o.claimUID != "" {
		uid = o.claimUID
	}
	vol := volume{pv: pvName, claim: name, handle: o.handle, unique: csivolume.NewUniqueName(s.driver, o.handle)}
	if !o.noPV {
		s.createPV(vol, o.modes, uid)
	}
	return vol
}

func (s *scenario) createPV(vol volume, modes []v1.PersistentVolumeAccessMode, claimUID string) {
	s.t.Helper()
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: vol.pv},
		Spec: v1.PersistentVolumeSpec{
			AccessModes: modes,
			Capacity:    v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			ClaimRef:    &v1.ObjectReference{Namespace: s.ns, Name: vol.claim, UID: types.UID(claimUID)},
			PersistentVolumeSource: v1.PersistentVolumeSource{
				CSI: &v1.CSIPersistentVolumeSource{Driver: s.driver, VolumeHandle: vol.handle},
			},
		},
	}
	_, err := s.client.CoreV1().PersistentVolumes().Create(s.ctx, pv, metav1.CreateOptions{})
	s.must(err)
}

// createPod creates a pod on the node using the claims.
func (s *scenario) createPod(name, node string, claims ...string) {
	s.t.Helper()
	pod := s.podSpec(name, node)
	for _, c := range claims {
		pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{
			Name:         "v-" + c,
			VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: c}},
		})
	}
	s.createPodObject(pod)
}

func (s *scenario) podSpec(name, node string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
		Spec: v1.PodSpec{
			NodeName:   node,
			Containers: []v1.Container{{Name: "c", Image: "registry.example/app"}},
		},
	}
}

func (s *scenario) createPodObject(pod *v1.Pod) {
	s.t.Helper()
	_, err := s.client.CoreV1().Pods(pod.Namespace).Create(s.ctx, pod, metav1.CreateOptions{})
	s.must(err)
}

// deletePod deletes the pod gracefully: the kubelet simulator stops its containers,
// unmounts its volumes and then removes it for good.
func (s *scenario) deletePod(name string) {
	s.t.Helper()
	s.must(s.client.CoreV1().Pods(s.ns).Delete(s.ctx, name, metav1.DeleteOptions{}))
}

// attachments returns the scenario driver's VolumeAttachments.
func (s *scenario) attachments() []storagev1.VolumeAttachment {
	list, err := s.client.StorageV1().VolumeAttachments().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil
	}
	var out []storagev1.VolumeAttachment
	for _, va := range list.Items {
		if va.Spec.Attacher == s.driver {
			out = append(out, va)
		}
	}
	return out
}

func (s *scenario) vaName(vol volume, node string) string {
	return csivolume.AttachmentName(vol.handle, s.driver, node)
}

// eventually waits for cond, failing the test with what after the timeout.
func (s *scenario) eventually(what string, cond func() bool) {
	s.t.Helper()
	s.eventuallyWithin(waitTimeout, what, cond)
}

func (s *scenario) eventuallyWithin(timeout time.Duration, what string, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(pollEvery)
	}
}

// never checks that cond stays false for the duration.
func (s *scenario) never(d time.Duration, what string, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			s.t.Fatalf("unexpected: %s", what)
		}
		time.Sleep(pollEvery)
	}
}

func (s *scenario) vaExists(vol volume, node string) bool {
	_, err := s.client.StorageV1().VolumeAttachments().Get(context.Background(), s.vaName(vol, node), metav1.GetOptions{})
	return err == nil
}

func (s *scenario) inNodeStatus(node string, vol volume) bool {
	n, err := s.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		return false
	}
	for _, av := range n.Status.VolumesAttached {
		if av.Name == v1.UniqueVolumeName(vol.unique) {
			return true
		}
	}
	return false
}

func (s *scenario) waitAttached(vol volume, node string) {
	s.t.Helper()
	s.eventually(fmt.Sprintf("%s in the volumesAttached of %s", vol.unique, node), func() bool { return s.inNodeStatus(node, vol) })
}

func (s *scenario) waitDetached(vol volume, node string) {
	s.t.Helper()
	s.eventually(fmt.Sprintf("VolumeAttachment of %s on %s to be gone", vol.pv, node), func() bool {
		return !s.vaExists(vol, node) && !s.inNodeStatus(node, vol)
	})
}

// podEvents returns "Type Reason Message" of the events on the pod, read back
// through the API.
func (s *scenario) podEvents(pod string) []string {
	list, err := s.client.CoreV1().Events(s.ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", pod).String(),
	})
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range list.Items {
		for range max(e.Count, 1) {
			out = append(out, e.Type+" "+e.Reason+" "+e.Message)
		}
	}
	return out
}

func (s *scenario) waitEvent(pod, want string) {
	s.t.Helper()
	s.eventually(fmt.Sprintf("event %q on pod %s", want, pod), func() bool {
		for _, e := range s.podEvents(pod) {
			if e == want {
				return true
			}
		}
		return false
	})
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
