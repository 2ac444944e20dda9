package e2e

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"

	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
	"github.com/attachdetach-controller/attachdetach-controller/test/csidriver"
)

// TestControllerKilledMidAttach kills the controller with SIGKILL while csi-attacher
// is in the middle of a slow ControllerPublishVolume, and starts it again: it takes
// the VolumeAttachment over (same name, same UID), the volume is published once, and
// node status ends up listing it.
func TestControllerKilledMidAttach(t *testing.T) {
	const delay = 3 * time.Second
	c := newCluster(t, clusterOptions{})
	node := c.Nodes[0]
	v := c.createVolume("data", corev1.ReadWriteOnce)
	c.Driver.SetDelay(delay)
	c.createPod("app", node, v.Claim)

	// csi-attacher's finalizer on the VolumeAttachment: it has started to attach.
	c.eventually("csi-attacher working on the VolumeAttachment", func() (bool, error) {
		va, err := c.Attachment(c.ctx, v, node)
		return va != nil && slices.Contains(va.Finalizers, sim.AttacherFinalizer(c.DriverName)), err
	})
	before := c.attachment(v, node)
	if before.Status.Attached {
		t.Fatalf("attached before the kill; the driver's delay is too short")
	}
	c.Controller.Kill()
	killed := time.Now()
	c.must(c.Controller.Start(c.ctx))
	t.Logf("controller ready again %s after the kill", time.Since(killed).Round(time.Millisecond))
	if va := c.attachment(v, node); va == nil || va.Status.Attached {
		t.Errorf("VolumeAttachment %v after the restart, want the same one still attaching", va)
	}

	c.waitAttached(v, node)
	c.waitPodRunning("app")
	after := c.attachment(v, node)
	if after == nil || after.UID != before.UID {
		t.Errorf("the VolumeAttachment was replaced across the restart: UID %s, then %v", before.UID, after)
	}
	vas, err := c.Attachments(c.ctx)
	c.must(err)
	if len(vas) != 1 {
		t.Errorf("VolumeAttachments %v, want only %s", attachmentNames(vas), before.Name)
	}
	if n := len(c.publishes(v, node, codes.OK)); n != 1 {
		t.Errorf("successful ControllerPublishVolume calls = %d, want 1", n)
	}
	if calls := c.Driver.CallsFor(csidriver.OpUnpublish, v.Handle); len(calls) != 0 {
		t.Errorf("ControllerUnpublishVolume calls %+v across the restart, want none", calls)
	}
}
