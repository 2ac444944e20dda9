package controller

import (
	"context"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// requeueHarness is a controller whose reconciler does not run, so that its queue
// shows what was put on it, with a PV whose volume it can attach to node-a.
type requeueHarness struct {
	c   *Controller
	ctx context.Context
	vol cache.Volume
	va  *storagev1.VolumeAttachment
}

func newRequeueHarness(t *testing.T) *requeueHarness {
	t.Helper()
	c := newTestController(t)
	addToInformers(t, c, csiPV("pv-1", "h-1", "ns", "data"))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		waitCtx, stop := context.WithTimeout(context.Background(), 10*time.Second)
		defer stop()
		if err := c.executor.Wait(waitCtx); err != nil {
			t.Error(err)
		}
	})
	return &requeueHarness{
		c:   c,
		ctx: ctx,
		// The PV lists no access modes: a multi-attach volume.
		vol: cache.Volume{Name: volumename.CSI(testDriver, "h-1"), Driver: testDriver, Handle: "h-1", PVName: "pv-1", MultiAttach: true},
		va:  volumeAttachment("h-1", "node-a", pvSource("pv-1"), false),
	}
}

// startAttach starts attaching the volume to node-a and returns once the attach
// waits for the informer to show its VolumeAttachment attached.
func (h *requeueHarness) startAttach(t *testing.T) {
	t.Helper()
	if err := h.c.executor.Attach(h.ctx, h.vol, "node-a", nil); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if !eventually(10*time.Second, func() bool { return h.c.executor.WaitsFor(h.va.Name) }) {
		t.Fatal("the attach never waited for its VolumeAttachment")
	}
	att, _ := h.c.actual.Object(h.va.Name)
	h.va.UID = att.UID
}

// TestAVolumeAttachmentAnOperationWaitsForDoesNotQueueItsVolume: a change of a
// VolumeAttachment queues its volume, unless an operation waits for that
// object: the operation ends after the change and queues the volume then, and a
// Sync before that could only find the operation running.
func TestAVolumeAttachmentAnOperationWaitsForDoesNotQueueItsVolume(t *testing.T) {
	tests := []struct {
		name        string
		attachWaits bool
		deleted     bool
		wantQueued  int
	}{
		{name: "changed, no operation waits for it", wantQueued: 1},
		{name: "deleted, no operation waits for it", deleted: true, wantQueued: 1},
		{name: "changed, the attach waits for it", attachWaits: true, wantQueued: 0},
		{name: "deleted, the attach waits for it", attachWaits: true, deleted: true, wantQueued: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newRequeueHarness(t)
			if tc.attachWaits {
				h.startAttach(t)
			} else {
				h.c.actual.Observe(cache.Observation{Volume: h.vol.Name, MultiAttach: true, Node: "node-a", VolumeAttachment: h.va.Name, UID: h.va.UID})
			}
			if tc.deleted {
				h.c.onVolumeAttachmentDelete(h.va)
			} else {
				h.c.onVolumeAttachment(h.ctx, h.va)
			}
			if got := h.c.reconciler.QueueLength(); got != tc.wantQueued {
				t.Errorf("volumes queued = %d, want %d", got, tc.wantQueued)
			}
		})
	}
}

// TestAnAttachQueuesItsVolumeWhenItEnds: the volume whose attach the informer's
// news of its VolumeAttachment ended is queued again, by the attach's end, so
// that what comes next (node status, other nodes) follows.
func TestAnAttachQueuesItsVolumeWhenItEnds(t *testing.T) {
	h := newRequeueHarness(t)
	h.startAttach(t)
	h.va.Status.Attached = true
	h.c.onVolumeAttachment(h.ctx, h.va)
	if !eventually(10*time.Second, func() bool { return h.c.reconciler.QueueLength() == 1 }) {
		t.Fatalf("volumes queued = %d once the attach ended, want 1", h.c.reconciler.QueueLength())
	}
	if on, ok := h.c.actual.Get(h.vol.Name, "node-a"); !ok || !on.Attached() {
		t.Errorf("attachment = %+v, %v, want attached", on, ok)
	}
}
