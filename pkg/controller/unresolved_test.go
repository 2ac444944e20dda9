package controller

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// TestUnidentifiedVolumeAttachmentIdentifiedByItsNodeWithoutThePeriodicPass: a
// VolumeAttachment whose PV is missing holds that PV and is left alone while
// nothing tells its volume. Once its node's status names the volume, it is
// identified and follows the rules of any other: here no pod needs it and kubelet
// does not use it, so it is detached. That must not wait for the periodic pass,
// which may be off (found by review: it was never detached).
func TestUnidentifiedVolumeAttachmentIdentifiedByItsNodeWithoutThePeriodicPass(t *testing.T) {
	ctx := context.Background()
	vol := volumename.CSI(testDriver, "h-1")
	va := volumeAttachment("h-1", "node-a", pvSource("pv-gone"), true)
	c := runningController(t, node("node-a", nil, nil), va)
	if !eventually(3*time.Second, func() bool { return len(c.actual.UnresolvedForPV("pv-gone")) == 1 }) {
		t.Fatal("the VolumeAttachment of a missing PV is not recorded as holding it")
	}
	if _, err := c.client.CoreV1().Nodes().Update(ctx, node("node-a", []volumename.UniqueName{vol}, nil), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	gone := func() bool {
		_, err := c.client.StorageV1().VolumeAttachments().Get(ctx, va.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}
	if !eventually(5*time.Second, gone) {
		t.Errorf("VolumeAttachment %s still exists 5 s after node-a's status named its unused volume; unresolved: %q", va.Name, c.actual.UnresolvedForPV("pv-gone"))
	}
}
