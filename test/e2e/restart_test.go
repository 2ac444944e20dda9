package e2e

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/attachdetach-controller/attachdetach-controller/internal/csidriver"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

// TestControllerKilledMidAttach kills the controller with SIGKILL while csi-attacher
// is in the middle of a slow ControllerPublishVolume, and starts it again: it takes
// the VolumeAttachment over (same name, same UID), the volume is published once, and
// node status ends up listing it.
func TestControllerKilledMidAttach(t *testing.T) {
	const delay = 3 * time.Second
	c := newCluster(t, clusterOptions{})
	node := c.Nodes[0]
	v := c.CreateVolume("data", workload.VolumeOptions{})
	c.local.Driver.SetDelay(delay)
	c.CreatePod("app", node, v.Claim)

	// csi-attacher's finalizer on the VolumeAttachment: it has started to attach.
	c.Eventually("csi-attacher working on the VolumeAttachment", func() bool {
		va := c.Attachment(v, node)
		return va != nil && slices.Contains(va.Finalizers, sim.AttacherFinalizer(c.Driver))
	})
	before := c.Attachment(v, node)
	if before.Status.Attached {
		t.Fatalf("attached before the kill; the driver's delay is too short")
	}
	c.Must(c.local.Controller.Kill())
	killed := time.Now()
	c.Must(c.local.Controller.Start(t.Context()))
	c.Must(c.local.Controller.WaitReady(t.Context()))
	t.Logf("controller ready again %s after the kill", time.Since(killed).Round(time.Millisecond))
	if va := c.Attachment(v, node); va == nil || va.Status.Attached {
		t.Errorf("VolumeAttachment %v after the restart, want the same one still attaching", va)
	}

	c.WaitAttached(v, node)
	c.WaitPodRunning("app")
	after := c.Attachment(v, node)
	if after == nil || after.UID != before.UID {
		t.Errorf("the VolumeAttachment was replaced across the restart: UID %s, then %v", before.UID, after)
	}
	if vas := c.Attachments(); len(vas) != 1 {
		t.Errorf("%d VolumeAttachments, want only %s", len(vas), before.Name)
	}
	if n := len(c.publishes(v, node, codes.OK)); n != 1 {
		t.Errorf("successful ControllerPublishVolume calls = %d, want 1", n)
	}
	if calls := c.local.Driver.CallsFor(csidriver.OpUnpublish, v.Handle); len(calls) != 0 {
		t.Errorf("ControllerUnpublishVolume calls %+v across the restart, want none", calls)
	}
}
