package e2e

import (
	"maps"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"

	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
	"github.com/attachdetach-controller/attachdetach-controller/test/csidriver"
)

// TestAttachAndDetach follows a volume through a real ControllerPublishVolume and
// ControllerUnpublishVolume.
func TestAttachAndDetach(t *testing.T) {
	c := newCluster(t, clusterOptions{})
	node := c.Nodes[0]
	v := c.createVolume("data", corev1.ReadWriteOnce)
	c.createPod("app", node, v.Claim)
	c.waitAttached(v, node)
	c.waitPodRunning("app")

	va := c.attachment(v, node)
	switch {
	case va == nil:
		t.Fatalf("no VolumeAttachment %s", c.AttachmentName(v, node))
	case va.Spec.Attacher != c.DriverName || va.Spec.NodeName != node || va.Spec.Source.PersistentVolumeName == nil || *va.Spec.Source.PersistentVolumeName != v.PV:
		t.Errorf("VolumeAttachment spec %+v, want attacher %s, node %s, PV %s", va.Spec, c.DriverName, node, v.PV)
	case !va.Status.Attached || va.Status.AttachmentMetadata[csidriver.DevicePathKey] != "/dev/csi-test/"+v.Handle:
		t.Errorf("VolumeAttachment status %+v, want attached with the driver's publish context", va.Status)
	case !slices.Contains(va.Finalizers, sim.AttacherFinalizer(c.DriverName)):
		t.Errorf("VolumeAttachment finalizers %v, want csi-attacher's", va.Finalizers)
	}
	if got, want := c.Driver.Published(), map[string][]string{v.Handle: {c.NodeID(node)}}; !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("driver has published %v, want %v", got, want)
	}
	// csi-attacher may repeat the idempotent call; every one must be for this node.
	calls := c.Driver.CallsFor(csidriver.OpPublish, v.Handle)
	if len(calls) == 0 || slices.ContainsFunc(calls, func(call csidriver.Call) bool {
		return call.NodeID != c.NodeID(node) || call.Code != codes.OK
	}) {
		t.Errorf("ControllerPublishVolume calls %+v, want only successful ones on %s", calls, c.NodeID(node))
	}
	c.waitEvent("app", "SuccessfulAttachVolume", func(e string) bool {
		return e == `Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "`+v.PV+`"`
	})

	c.deletePod("app")
	c.waitDetached(v, node)
	if got := c.Driver.Published(); len(got) != 0 {
		t.Errorf("driver still has published %v after detach", got)
	}
	if calls := c.Driver.CallsFor(csidriver.OpUnpublish, v.Handle); len(calls) != 1 || calls[0].NodeID != c.NodeID(node) || calls[0].Code != codes.OK {
		t.Errorf("ControllerUnpublishVolume calls %+v, want one successful on %s", calls, c.NodeID(node))
	}
}

// TestRWOMoveWaitsForTheFinalizer moves a ReadWriteOnce volume while the driver
// fails the first ControllerUnpublishVolume calls: the old VolumeAttachment, deleted,
// lingers on csi-attacher's finalizer, and the controller must not attach the volume
// to the new node before it is really gone.
func TestRWOMoveWaitsForTheFinalizer(t *testing.T) {
	c := newCluster(t, clusterOptions{unmountDelay: 200 * time.Millisecond})
	a, b := c.Nodes[0], c.Nodes[1]
	v := c.createVolume("data", corev1.ReadWriteOnce)
	c.createPod("first", a, v.Claim)
	c.waitAttached(v, a)

	c.must(c.Driver.SetFault(csidriver.OpUnpublish, v.Handle, csidriver.Fault{Code: codes.Unavailable, Message: "backend busy", Count: 3}))
	c.createPod("second", b, v.Claim)
	c.waitEvent("second", "Multi-Attach", func(e string) bool {
		return e == `Warning FailedAttachVolume Multi-Attach error for volume "`+v.PV+`" Volume is already used by pod(s) first`
	})
	c.deletePod("first")

	lingered, overlapped := false, false
	c.eventually("the volume attached to "+b, func() (bool, error) {
		old, err := c.Attachment(c.ctx, v, a)
		if err != nil {
			return false, err
		}
		next, err := c.Attachment(c.ctx, v, b)
		if err != nil {
			return false, err
		}
		lingered = lingered || (old != nil && old.DeletionTimestamp != nil && old.Status.DetachError != nil)
		overlapped = overlapped || (old != nil && next != nil)
		attached, _, err := c.InNodeStatus(c.ctx, b, v)
		return attached, err
	})
	if !lingered {
		t.Errorf("never saw the old VolumeAttachment deleted and held by its finalizer with a detachError")
	}
	if overlapped {
		t.Errorf("a VolumeAttachment on %s existed while the one on %s was not gone yet", b, a)
	}
	if n := len(c.unpublishes(v, a, codes.Unavailable)); n != 3 {
		t.Errorf("failed ControllerUnpublishVolume calls = %d, want the 3 injected", n)
	}
	assertNeverOnTwoNodes(t, c.Driver.CallsFor(csidriver.OpPublish, v.Handle), c.Driver.CallsFor(csidriver.OpUnpublish, v.Handle))
	if got := c.Driver.PublishedNodes(v.Handle); !slices.Equal(got, []string{c.NodeID(b)}) {
		t.Errorf("driver has %s published on %v, want only %s", v.Handle, got, c.NodeID(b))
	}
}

// assertNeverOnTwoNodes replays the successful publish and unpublish calls of one
// volume in order and fails if it was ever published on two nodes at once.
func assertNeverOnTwoNodes(t *testing.T, publishes, unpublishes []csidriver.Call) {
	t.Helper()
	calls := slices.Concat(publishes, unpublishes)
	slices.SortStableFunc(calls, func(x, y csidriver.Call) int { return x.Time.Compare(y.Time) })
	published := map[string]bool{}
	for _, call := range calls {
		switch {
		case call.Code != codes.OK:
			continue
		case call.Operation == csidriver.OpPublish:
			published[call.NodeID] = true
		default:
			delete(published, call.NodeID)
		}
		if len(published) > 1 {
			t.Fatalf("volume published on %v at once after %+v; calls: %+v", slices.Sorted(maps.Keys(published)), call, calls)
		}
	}
}
