package operationexecutor

import (
	"errors"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// otherNode is a second node, for a volume held by one node and wanted by another.
const otherNode = "node-2"

// testRWX is testPV as a volume several nodes may attach at once.
var testRWX = func() cache.Volume {
	v := testPV
	v.MultiAttach = true
	return v
}()

// vaName is the VolumeAttachment name of testPV on the node.
func vaName(node string) string { return volumename.AttachmentName(testHandle, testDriver, node) }

// objectOn is an attached VolumeAttachment of testPV on the node.
func objectOn(name, node string, uid types.UID) *storagev1.VolumeAttachment {
	pv := testPV.PVName
	return &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid, ResourceVersion: "5"},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: testDriver, NodeName: node,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv},
		},
		Status: storagev1.VolumeAttachmentStatus{Attached: true},
	}
}

// addAttached records an attached VolumeAttachment of testPV on the API server,
// in the informer and in the actual state.
func (h *execHarness) addAttached(t *testing.T, name, node string, uid types.UID, multiAttach bool) {
	t.Helper()
	va := objectOn(name, node, uid)
	if err := h.client.Tracker().Add(va.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if err := h.vas.Add(va.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	h.actual.Observe(cache.Observation{
		Volume: testPV.Name, Node: node, VolumeAttachment: name, UID: uid, Attached: true, MultiAttach: multiAttach,
	})
}
func (h *execHarness) onNode(t *testing.T, node string) cache.OnNode {
	t.Helper()
	on, ok := h.actual.Get(testPV.Name, node)
	if !ok {
		t.Fatalf("nothing recorded of %s on %s", testPV.Name, node)
	}
	return on
}

// completeAttach waits for the attach to the node to wait for the informer, and
// shows it the object attached.
func (h *execHarness) completeAttach(t *testing.T, node string) {
	t.Helper()
	name := vaName(node)
	h.waitWaiting(t, name)
	va, err := h.client.StorageV1().VolumeAttachments().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.exec.ObserveVolumeAttachment(name, withStatus(va, func(va *storagev1.VolumeAttachment) { va.Status.Attached = true }))
	h.waitDone(t)
}
func (h *execHarness) createdOn(node string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.ContainsFunc(h.created, func(va *storagev1.VolumeAttachment) bool { return va.Spec.NodeName == node })
}
func (h *execHarness) operations(kind, result string) float64 {
	return testutil.ToFloat64(h.metrics.Operations.WithLabelValues(kind, result))
}

// wantHeld checks that err is a *HeldError naming exactly nodes, and that the
// refused attach left nothing behind: no create, no lock, no backoff.
func (h *execHarness) wantHeld(t *testing.T, err error, node string, nodes ...string) {
	t.Helper()
	var held *HeldError
	if !errors.As(err, &held) {
		t.Fatalf("Attach to %s = %v, want a *HeldError", node, err)
	}
	if !slices.Equal(held.Nodes, nodes) {
		t.Errorf("HeldError.Nodes = %q, want %q", held.Nodes, nodes)
	}
	if h.createdOn(node) {
		t.Errorf("a VolumeAttachment for %s was created though the volume is held", node)
	}
	if h.exec.IsRunning(testPV.Name, node) {
		t.Error("the lock is still held after the attach was refused")
	}
	if h.backingOff(testPV.Name, node) {
		t.Error("a refused attach backs off: it never ran")
	}
}
