package operationexecutor

import (
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// TestADeletedObjectTheInformerNeverShowedIsForgottenOnceGone: the controller's
// create of a VolumeAttachment got no answer, the informer was relisting and
// never showed the object, and the volume was detached: the delete took effect,
// and the external-attacher removed the object before the informer listed
// again. No informer event will ever say it is gone: the informer never held
// it. The executor reads it from the API server until it is gone, and forgets
// it, whether or not the periodic pass runs. Before, the record stayed "being
// deleted" for good with --disable-attach-detach-reconcile-sync: a pod needing
// the volume on that node waited for a detach that had long ended, and a
// single-attach volume counted as held there, so no other node got it either
// (simulation seeds 4679 and 48776).
func TestADeletedObjectTheInformerNeverShowedIsForgottenOnceGone(t *testing.T) {
	lost := apierrors.NewInternalError(errors.New("etcd leader changed"))
	tests := []struct {
		name string
		// lost: the delete's answer was lost, and so was the read meant to learn
		// its outcome.
		lost bool
	}{
		{name: "the delete was accepted"},
		{name: "the delete's outcome was unknown until a later read", lost: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, 300*time.Millisecond, objectOn(testVAName, testNode, vaUID))
			h.actual.BeginCreate(testPV.Name, testNode, testVAName, false)
			if tc.lost {
				h.deleteErr, h.deleteApplies, h.getErr = lost, true, lost
			}
			on, _ := h.actual.Get(testPV.Name, testNode)
			if err := h.exec.Detach(t.Context(), on, cache.NotForced); err != nil {
				t.Fatalf("Detach: %v", err)
			}
			h.waitDone(t)
			if n := h.deleteCount(); n != 1 {
				t.Fatalf("setup: %d deletes, want 1", n)
			}

			// The API server answers reads again; the informer never shows the
			// object; no periodic pass runs.
			h.mu.Lock()
			h.getErr = nil
			h.mu.Unlock()
			deadline := time.Now().Add(waitLimit)
			for {
				att, ok := h.actual.Object(testVAName)
				if !ok {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("record %+v still there %s after the object was gone from the API server: only the periodic pass would read it", att, waitLimit)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if holders := h.actual.Holders(testPV.Name, testPV.PVName, "node-2"); len(holders) != 0 {
				t.Errorf("volume still held by %q once its only object is gone", holders)
			}
		})
	}
}

// TestDetachNotFoundForgetsAnUnseenObject: deleting an object the controller
// tried to create and never saw, and learning that it does not exist, settles it:
// the record goes and stops holding the volume. An object the informer shows is
// left for the informer to forget.
func TestDetachNotFoundForgetsAnUnseenObject(t *testing.T) {
	tests := []struct {
		name       string
		setup      func(t *testing.T, h *execHarness)
		wantUID    types.UID
		wantForget bool
	}{
		{
			name: "create without an answer",
			setup: func(t *testing.T, h *execHarness) {
				h.actual.BeginCreate(testPV.Name, testNode, testVAName, false)
			},
			wantForget: true,
		},
		{
			name: "created, never seen",
			setup: func(t *testing.T, h *execHarness) {
				h.actual.BeginCreate(testPV.Name, testNode, testVAName, false)
				h.actual.Created(testVAName, vaUID)
			},
			wantUID:    vaUID,
			wantForget: true,
		},
		{
			name: "seen by the informer, already gone from the API server",
			setup: func(t *testing.T, h *execHarness) {
				if err := h.vas.Add(attachedObject()); err != nil {
					t.Fatal(err)
				}
				h.actual.Observe(cache.Observation{Volume: testPV.Name, Node: testNode, VolumeAttachment: testVAName, UID: vaUID, Attached: true})
			},
			wantUID: vaUID,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, time.Minute)
			tc.setup(t, h)
			if err := h.exec.Detach(t.Context(), h.onNode(t, testNode), cache.NotForced); err != nil {
				t.Fatalf("Detach: %v", err)
			}
			if !tc.wantForget {
				h.waitWaiting(t, testVAName)
				if _, ok := h.actual.Object(testVAName); !ok {
					t.Error("an object the informer shows was forgotten on NotFound")
				}
				h.exec.ObserveVolumeAttachment(testVAName, nil)
			}
			h.waitDone(t)
			if h.operations("detach", "success") != 1 {
				t.Error("the detach did not succeed")
			}
			h.mu.Lock()
			deletes := h.deletes
			h.mu.Unlock()
			if len(deletes) != 1 {
				t.Fatalf("%d deletes, want 1", len(deletes))
			}
			var gotUID types.UID
			if pre := deletes[0].GetDeleteOptions().Preconditions; pre != nil && pre.UID != nil {
				gotUID = *pre.UID
			}
			if gotUID != tc.wantUID {
				t.Errorf("delete precondition uid %q, want %q", gotUID, tc.wantUID)
			}
			if !tc.wantForget {
				return
			}
			if _, ok := h.actual.Object(testVAName); ok {
				t.Error("the unseen object is still recorded after its delete found nothing")
			}
			if holders := h.actual.Holders(testPV.Name, testPV.PVName, otherNode); len(holders) != 0 {
				t.Errorf("holders = %q, want none", holders)
			}
		})
	}
}
