package e2e

import (
	"maps"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/attachdetach-controller/attachdetach-controller/internal/csidriver"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
)

// TestAttachAndDetach follows a volume through a real ControllerPublishVolume and
// ControllerUnpublishVolume.
func TestAttachAndDetach(t *testing.T) {
	c := newCluster(t, clusterOptions{})
	node := c.Nodes[0]
	v := c.AttachedVolume("data", "app", node)
	c.WaitPodRunning("app")

	va := c.Attachment(v, node)
	switch {
	case va == nil:
		t.Fatalf("no VolumeAttachment %s", v.AttachmentName(node))
	case va.Spec.Attacher != c.Driver || va.Spec.NodeName != node || va.Spec.Source.PersistentVolumeName == nil || *va.Spec.Source.PersistentVolumeName != v.PV:
		t.Errorf("VolumeAttachment spec %+v, want attacher %s, node %s, PV %s", va.Spec, c.Driver, node, v.PV)
	case !va.Status.Attached || va.Status.AttachmentMetadata[csidriver.DevicePathKey] != "/dev/csi-test/"+v.Handle:
		t.Errorf("VolumeAttachment status %+v, want attached with the driver's publish context", va.Status)
	case !slices.Contains(va.Finalizers, sim.AttacherFinalizer(c.Driver)):
		t.Errorf("VolumeAttachment finalizers %v, want csi-attacher's", va.Finalizers)
	}
	if got, want := c.local.Driver.Published(), map[string][]string{v.Handle: {c.nodeID(node)}}; !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("driver has published %v, want %v", got, want)
	}
	// csi-attacher may repeat the idempotent call; every one must be for this node.
	calls := c.local.Driver.CallsFor(csidriver.OpPublish, v.Handle)
	if len(calls) == 0 || slices.ContainsFunc(calls, func(call csidriver.Call) bool {
		return call.NodeID != c.nodeID(node) || call.Code != codes.OK
	}) {
		t.Errorf("ControllerPublishVolume calls %+v, want only successful ones on %s", calls, c.nodeID(node))
	}
	c.WaitEvent("app", `Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "`+v.PV+`" `)

	c.DeletePod("app")
	c.WaitDetached(v, node)
	if got := c.local.Driver.Published(); len(got) != 0 {
		t.Errorf("driver still has published %v after detach", got)
	}
	if calls := c.local.Driver.CallsFor(csidriver.OpUnpublish, v.Handle); len(calls) != 1 || calls[0].NodeID != c.nodeID(node) || calls[0].Code != codes.OK {
		t.Errorf("ControllerUnpublishVolume calls %+v, want one successful on %s", calls, c.nodeID(node))
	}
}

// TestRWOMoveWaitsForTheFinalizer moves a ReadWriteOnce volume while the driver
// fails the first ControllerUnpublishVolume calls: the old VolumeAttachment, deleted,
// lingers on csi-attacher's finalizer, and the controller must not attach the volume
// to the new node before it is really gone.
func TestRWOMoveWaitsForTheFinalizer(t *testing.T) {
	c := newCluster(t, clusterOptions{unmountDelay: 200 * time.Millisecond})
	a, b := c.Nodes[0], c.Nodes[1]
	v := c.AttachedVolume("data", "first", a)

	c.Must(c.local.Driver.SetFault(csidriver.OpUnpublish, v.Handle, csidriver.Fault{Code: codes.Unavailable, Message: "backend busy", Count: 3}))
	c.CreatePod("second", b, v.Claim)
	c.WaitEvent("second", `Warning FailedAttachVolume Waiting for detach for volume "`+v.PV+`" Volume is already used by pod(s) first`)
	c.DeletePod("first")

	lingered, overlapped := false, false
	c.Eventually("the volume attached to "+b, func() bool {
		// Two reads, the new node's first: an old VolumeAttachment still there
		// after a new one was seen is an overlap; read the other way round, a
		// deletion and a creation between the reads would look like one.
		next := c.Attachment(v, b)
		old := c.Attachment(v, a)
		lingered = lingered || (old != nil && old.DeletionTimestamp != nil && old.Status.DetachError != nil)
		overlapped = overlapped || (old != nil && next != nil)
		return c.InNodeStatus(b, v)
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
	assertNeverOnTwoNodes(t, c.local.Driver.CallsFor(csidriver.OpPublish, v.Handle), c.local.Driver.CallsFor(csidriver.OpUnpublish, v.Handle))
	if got := c.local.Driver.PublishedNodes(v.Handle); !slices.Equal(got, []string{c.nodeID(b)}) {
		t.Errorf("driver has %s published on %v, want only %s", v.Handle, got, c.nodeID(b))
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
