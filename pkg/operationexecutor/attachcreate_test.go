package operationexecutor

import (
	"errors"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

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

// TestRefusedCreateKeepsAnObjectTheInformerShows: while the controller's create
// is on its way, the informer shows a VolumeAttachment of the same name that
// someone else made (the previous leader's create landing during a handover, or
// kube-controller-manager's attach-detach controller during a migration), and the
// API server then refuses the controller's own create (429 here; 403 would do).
// create() calls Actual.Forget(name, "") on a refused create, which drops the
// record the informer made: the object exists, is attached, yet no longer holds
// the volume, and an attach of the single-attach volume to another node starts.
// Created() and forgetIfUnseen() both leave a seen object alone; the refused path
// should too.
func TestRefusedCreateKeepsAnObjectTheInformerShows(t *testing.T) {
	h := newExecHarness(t, time.Minute)
	h.informerSeesCreates = true
	h.client.PrependReactor("create", "volumeattachments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		theirs := withStatus(a.(clienttesting.CreateAction).GetObject().(*storagev1.VolumeAttachment), func(va *storagev1.VolumeAttachment) {
			va.UID = "their-uid"
			va.Status.Attached = true
		})
		if err := h.vas.Add(theirs); err != nil {
			t.Error(err)
		}
		h.actual.Observe(cache.Observation{Volume: testPV.Name, Node: testNode, VolumeAttachment: theirs.Name, UID: theirs.UID, Attached: true})
		return true, nil, apierrors.NewTooManyRequests("slow down", 1)
	})
	if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	h.waitDone(t)

	if att, ok := h.actual.Object(testVAName); !ok || !att.Seen || att.UID != "their-uid" {
		t.Errorf("record after the refused create = %+v, %v; want the object the informer shows", att, ok)
	}
	err := h.exec.Attach(t.Context(), testPV, otherNode, testPods)
	var held *HeldError
	if !errors.As(err, &held) {
		t.Errorf("Attach to %s = %v, want a *HeldError: %s holds the volume", otherNode, err, testNode)
	}
}

// TestRefusedCreateKeepsTheRecordOfAnEarlierCreate: an earlier create got no
// answer, so its object may exist; the attach that follows sends the create
// again, and the API server refuses it. That refusal proves that this create
// made nothing, not that the earlier one did not: the record stays, and keeps
// holding the single-attach volume.
func TestRefusedCreateKeepsTheRecordOfAnEarlierCreate(t *testing.T) {
	h := newExecHarness(t, time.Minute)
	h.actual.BeginCreate(testPV.Name, testNode, testVAName, false)
	h.createErr = apierrors.NewForbidden(storagev1.Resource("volumeattachments"), testVAName, errors.New("denied"))
	if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	h.waitDone(t)
	if !h.createdOn(testNode) {
		t.Fatal("setup: no create was sent")
	}
	if att, ok := h.actual.Object(testVAName); !ok || att.Seen || att.UID != "" {
		t.Errorf("record after the refused create = %+v, %v; want the earlier create's, unseen and without UID", att, ok)
	}
	h.wantHeld(t, h.exec.Attach(t.Context(), testPV, otherNode, testPods), otherNode, testNode)
}
