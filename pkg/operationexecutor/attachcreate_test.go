package operationexecutor

import (
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// TestAttachCreatesUnlessTheInformerHasShownTheObject: an attach sends a create
// when nothing is recorded of the VolumeAttachment, and again when the record is
// that of an earlier create whose outcome is unknown (the object may or may not
// exist, and creating it again settles that); when the informer has shown the
// object, it only waits for the external-attacher.
func TestAttachCreatesUnlessTheInformerHasShownTheObject(t *testing.T) {
	tests := []struct {
		name       string
		setup      func(t *testing.T, h *execHarness)
		wantCreate bool
	}{
		{
			name:       "nothing recorded",
			setup:      func(*testing.T, *execHarness) {},
			wantCreate: true,
		},
		{
			name: "recorded by an earlier create of unknown outcome, never seen",
			setup: func(t *testing.T, h *execHarness) {
				h.actual.BeginCreate(testPV.Name, testNode, testVAName, false)
			},
			wantCreate: true,
		},
		{
			name: "shown by the informer, not attached yet",
			setup: func(t *testing.T, h *execHarness) {
				va := withStatus(attachedObject(), func(va *storagev1.VolumeAttachment) { va.Status.Attached = false })
				if err := h.client.Tracker().Add(va.DeepCopy()); err != nil {
					t.Fatal(err)
				}
				if err := h.vas.Add(va); err != nil {
					t.Fatal(err)
				}
				h.actual.Observe(cache.Observation{Volume: testPV.Name, Node: testNode, VolumeAttachment: testVAName, UID: vaUID})
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, time.Minute)
			h.informerSeesCreates = true
			tc.setup(t, h)
			if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
				t.Fatalf("Attach: %v", err)
			}
			h.waitWaiting(t, testVAName)
			if got := h.createdOn(testNode); got != tc.wantCreate {
				t.Errorf("create sent = %v, want %v", got, tc.wantCreate)
			}
			h.exec.ObserveVolumeAttachment(testVAName, attachedObject())
			h.waitDone(t)
			if h.operations("attach", "success") != 1 {
				t.Error("the attach did not succeed")
			}
		})
	}
}
