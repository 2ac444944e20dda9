package suite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

const (
	// WaitTimeout bounds World's waits for one attach, detach or event.
	WaitTimeout = 30 * time.Second
	// PollInterval is how often the waits look at the API server.
	PollInterval = 20 * time.Millisecond
	// drainTimeout bounds Drain.
	drainTimeout = time.Minute
)

// World is one test's share of a control plane: a namespace of its own, a CSI driver
// name and nodes no other test uses. Its methods are workload.Workload's (the
// embedded Workload has the ones that return errors), failing the test on an error.
type World struct {
	workload.Workload
	T testing.TB
	// Nodes are the names of the world's nodes.
	Nodes []string
	// Kubelet and Attacher are the simulators of NewSimWorld; nil in NewWorld's.
	Kubelet  *sim.Kubelet
	Attacher *sim.Attacher
}

// NewWorld creates a world's namespace on a cluster that runs its own kubelet
// stand-in and external-attacher for driver on nodes.
func NewWorld(t testing.TB, client kubernetes.Interface, namespace, driver string, nodes []string) *World {
	t.Helper()
	w := &World{Workload: workload.Workload{Client: client, Namespace: namespace, Driver: driver}, T: t, Nodes: nodes}
	w.Must(w.Workload.CreateNamespace(t.Context()))
	return w
}

// SimOptions configures NewSimWorld's simulators.
type SimOptions struct {
	// Nodes is how many nodes the kubelet simulator runs; 2 if zero.
	Nodes int
	// UnmountDelay is how long the kubelet simulator takes to unmount a volume.
	UnmountDelay time.Duration
	// AttachDelay and DetachDelay are how long the external-attacher simulator takes.
	AttachDelay, DetachDelay time.Duration
}

// NewSimWorld makes a world on env with names of its own: namespace t-<id>, driver
// csi-<id>.example.com, nodes node-<id>-a, node-<id>-b..., run by the kubelet
// simulator, whose volumes the external-attacher simulator attaches. The simulators
// stop when the test ends.
func NewSimWorld(t testing.TB, env *testenv.Env, o SimOptions) *World {
	t.Helper()
	if o.Nodes == 0 {
		o.Nodes = 2
	}
	id := rand.String(5)
	var nodes []string
	for i := range o.Nodes {
		nodes = append(nodes, fmt.Sprintf("node-%s-%c", id, 'a'+i))
	}
	w := NewWorld(t, env.Client, "t-"+id, "csi-"+id+".example.com", nodes)
	// The simulators outlive t.Context(), which ends before the test's clean-ups run.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var err error
	w.Kubelet, err = sim.StartKubelet(ctx, env.AdminConfig(), sim.KubeletOptions{
		Nodes: nodes, CreateNodes: true, ManagePods: true, UnmountDelay: o.UnmountDelay,
	})
	w.Must(err)
	w.Attacher, err = sim.StartAttacher(ctx, env.AdminConfig(), sim.AttacherOptions{
		Drivers: []string{w.Driver}, AttachDelay: o.AttachDelay, DetachDelay: o.DetachDelay,
	})
	w.Must(err)
	return w
}

// Must fails the test on an error.
func (w *World) Must(err error) {
	w.T.Helper()
	if err != nil {
		w.T.Fatal(err)
	}
}

// CreateVolume creates a claim and its PersistentVolume (workload.CreateVolume).
func (w *World) CreateVolume(claim string, o workload.VolumeOptions) workload.Volume {
	w.T.Helper()
	v, err := w.Workload.CreateVolume(w.T.Context(), claim, o)
	w.Must(err)
	return v
}

// VolumeInPod creates a ReadWriteOnce volume for claim and a pod on node that
// uses it.
func (w *World) VolumeInPod(claim, pod, node string) workload.Volume {
	w.T.Helper()
	v := w.CreateVolume(claim, workload.VolumeOptions{})
	w.CreatePod(pod, node, claim)
	return v
}

// AttachedVolume is VolumeInPod, then waits until the node's status lists the
// volume as attached.
func (w *World) AttachedVolume(claim, pod, node string) workload.Volume {
	w.T.Helper()
	v := w.VolumeInPod(claim, pod, node)
	w.WaitAttached(v, node)
	return v
}

// RunningVolume is VolumeInPod, then waits until the pod runs: on a real
// kubelet, once the volume is attached, staged and published.
func (w *World) RunningVolume(claim, pod, node string) workload.Volume {
	w.T.Helper()
	v := w.VolumeInPod(claim, pod, node)
	w.WaitPodRunning(pod)
	return v
}

// CreatePV creates the PersistentVolume of a volume, bound to the claim with claimUID.
func (w *World) CreatePV(v workload.Volume, claimUID types.UID) {
	w.T.Helper()
	w.Must(w.Workload.CreatePV(w.T.Context(), v, claimUID))
}

// CreatePod creates a pod already scheduled to node that mounts the claims.
func (w *World) CreatePod(name, node string, claims ...string) {
	w.T.Helper()
	w.CreatePodObject(w.Pod(name, node, claims...))
}

// CreatePodObject creates a pod made with Pod and changed.
func (w *World) CreatePodObject(pod *corev1.Pod) {
	w.T.Helper()
	w.Must(w.Workload.CreatePod(w.T.Context(), pod))
}

// DeletePod deletes a pod gracefully: the kubelet stand-in stops it, unmounts its
// volumes and then removes it.
func (w *World) DeletePod(name string) {
	w.T.Helper()
	w.Must(w.Workload.DeletePod(w.T.Context(), name))
}

// DeletePodNow deletes a pod with no grace period.
func (w *World) DeletePodNow(name string) {
	w.T.Helper()
	w.Must(w.Workload.DeletePodNow(w.T.Context(), name))
}

// Attachment returns the VolumeAttachment of a volume on a node, nil if there is none.
func (w *World) Attachment(v workload.Volume, node string) *storagev1.VolumeAttachment {
	w.T.Helper()
	va, err := w.Workload.Attachment(w.T.Context(), v, node)
	w.Must(err)
	return va
}

// Attachments returns the VolumeAttachments of the world's driver.
func (w *World) Attachments() []storagev1.VolumeAttachment {
	w.T.Helper()
	vas, err := w.Workload.Attachments(w.T.Context())
	w.Must(err)
	return vas
}

// HasAttachment tells whether the volume has a VolumeAttachment on the node.
func (w *World) HasAttachment(v workload.Volume, node string) bool {
	w.T.Helper()
	return w.Attachment(v, node) != nil
}

// InNodeStatus tells whether the node's status.volumesAttached lists the volume.
func (w *World) InNodeStatus(node string, v workload.Volume) bool {
	w.T.Helper()
	attached, _, err := w.Workload.InNodeStatus(w.T.Context(), node, v)
	w.Must(err)
	return attached
}

// PodEvents returns the events about a pod (workload.PodEvents).
func (w *World) PodEvents(pod string) []string {
	w.T.Helper()
	events, err := w.Workload.PodEvents(w.T.Context(), pod)
	w.Must(err)
	return events
}

// WaitAttached waits until the node's status.volumesAttached lists the volume.
func (w *World) WaitAttached(v workload.Volume, node string) {
	w.T.Helper()
	w.Eventually(fmt.Sprintf("%s in the volumesAttached of %s", v.PV, node), func() bool { return w.InNodeStatus(node, v) })
}

// WaitDetached waits until the volume has no VolumeAttachment on the node and the
// node's status no longer lists it.
func (w *World) WaitDetached(v workload.Volume, node string) {
	w.T.Helper()
	w.Eventually(fmt.Sprintf("%s detached from %s", v.PV, node), func() bool {
		return !w.HasAttachment(v, node) && !w.InNodeStatus(node, v)
	})
}

// WaitEvent waits for an event about the pod, "<type> <reason> <message>".
func (w *World) WaitEvent(pod, want string) {
	w.T.Helper()
	w.Eventually(fmt.Sprintf("event %q on pod %s", want, pod), func() bool { return slices.Contains(w.PodEvents(pod), want) })
}

// WaitPodRunning waits until the pod's phase is Running.
func (w *World) WaitPodRunning(name string) {
	w.T.Helper()
	w.WaitPodRunningWithin(name, WaitTimeout)
}

// WaitPodRunningWithin is WaitPodRunning for a step that may take longer than
// WaitTimeout.
func (w *World) WaitPodRunningWithin(name string, timeout time.Duration) {
	w.T.Helper()
	Eventually(w.T, timeout, "pod "+name+" Running", func() bool {
		pod, err := w.Client.CoreV1().Pods(w.Namespace).Get(w.T.Context(), name, metav1.GetOptions{})
		w.Must(err)
		return pod.Status.Phase == corev1.PodRunning
	})
}

// Eventually waits for cond for at most WaitTimeout.
func (w *World) Eventually(what string, cond func() bool) {
	w.T.Helper()
	Eventually(w.T, WaitTimeout, what, cond)
}

// Never checks that cond stays false for d.
func (w *World) Never(d time.Duration, what string, cond func() bool) {
	w.T.Helper()
	Never(w.T, d, what, cond)
}

// Drain deletes the world's pods at once and waits until none of its driver's
// VolumeAttachments is left, so that no finalizer is left behind for the next tests,
// and no in-tree iSCSI or Fibre Channel volume is listed in its nodes' status; for a
// test's clean-up, with a controller (and external-attacher) still running.
func (w *World) Drain() {
	ctx := context.Background()
	pods := w.Client.CoreV1().Pods(w.Namespace)
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{}); err != nil {
		w.T.Errorf("deleting the pods of %s: %v", w.Namespace, err)
	}
	var left []storagev1.VolumeAttachment
	err := wait.PollUntilContextTimeout(ctx, PollInterval, drainTimeout, true, func(ctx context.Context) (bool, error) {
		var err error
		left, err = w.Workload.Attachments(ctx)
		return err == nil && len(left) == 0, nil
	})
	if err != nil {
		var names []string
		for _, va := range left {
			names = append(names, va.Name+" on "+va.Spec.NodeName)
		}
		w.T.Errorf("VolumeAttachments of the test still there after %s: %v", drainTimeout, names)
	}
	// In-tree iSCSI and Fibre Channel volumes have no VolumeAttachment: their
	// only record is node status.
	var listed []string
	err = wait.PollUntilContextTimeout(ctx, PollInterval, drainTimeout, true, func(ctx context.Context) (bool, error) {
		listed = nil
		for _, name := range w.Nodes {
			node, err := w.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return false, nil
			}
			for _, av := range node.Status.VolumesAttached {
				if strings.HasPrefix(string(av.Name), "kubernetes.io/iscsi/") || strings.HasPrefix(string(av.Name), "kubernetes.io/fc/") {
					listed = append(listed, string(av.Name)+" on "+name)
				}
			}
		}
		return len(listed) == 0, nil
	})
	if err != nil {
		w.T.Errorf("in-tree volumes of the test still in node status after %s: %v", drainTimeout, listed)
	}
}

// Eventually waits for cond, failing the test with what after the timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(PollInterval)
	}
}

// EventuallySucceeds waits until f returns nil, failing the test with what and f's
// last error after the timeout.
func EventuallySucceeds(t testing.TB, timeout time.Duration, what string, f func() error) {
	t.Helper()
	var err error
	deadline := time.Now().Add(timeout)
	for err = f(); err != nil; err = f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s:\n%v", timeout, what, err)
		}
		time.Sleep(PollInterval)
	}
}

// Never checks that cond stays false for d, failing the test with what if it holds.
func Never(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			t.Fatalf("unexpected: %s", what)
		}
		time.Sleep(PollInterval)
	}
}
