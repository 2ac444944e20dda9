package operationexecutor

import (
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// reads counts the reads of VolumeAttachments sent to the API server.
func (h *execHarness) reads() int {
	n := 0
	for _, a := range h.client.Actions() {
		if a.GetVerb() == "get" && a.GetResource() == vaResource {
			n++
		}
	}
	return n
}

// TestAttachReadsBackOnlyAnObjectTheInformerNeverShowed: an attach that ends
// without success reads its VolumeAttachment from the API server only if the
// informer never showed it (the create may have made nothing); an object the
// informer showed exists, or is the informer's to report gone.
func TestAttachReadsBackOnlyAnObjectTheInformerNeverShowed(t *testing.T) {
	tests := []struct {
		name    string
		timeout time.Duration
		// observe is what the informer delivers once the attach waits; nil:
		// nothing, and the informer never holds the object.
		observe   func() *storagev1.VolumeAttachment
		wantReads bool
	}{
		{
			name:    "shown with an attach error",
			timeout: time.Minute,
			observe: func() *storagev1.VolumeAttachment {
				return withStatus(attachedObject(), func(va *storagev1.VolumeAttachment) {
					va.Status.Attached = false
					va.Status.AttachError = &storagev1.VolumeError{Message: "rpc error: code = Internal desc = busy"}
				})
			},
		},
		{name: "never shown, timed out", timeout: 100 * time.Millisecond, wantReads: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, tc.timeout)
			if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
				t.Fatalf("Attach: %v", err)
			}
			if tc.observe != nil {
				h.waitWaiting(t, testVAName)
				va := tc.observe()
				if err := h.vas.Add(va); err != nil {
					t.Fatal(err)
				}
				h.exec.ObserveVolumeAttachment(testVAName, va)
			}
			h.waitDone(t)
			if h.operations("attach", "error") != 1 {
				t.Fatal("setup: the attach did not fail")
			}
			if got := h.reads() > 0; got != tc.wantReads {
				t.Errorf("read the VolumeAttachment back = %v (%d reads), want %v", got, h.reads(), tc.wantReads)
			}
			if _, ok := h.actual.Object(testVAName); !ok {
				t.Error("the record of an object the API server has was forgotten")
			}
		})
	}
}

// TestSettleReadsOnlyAnObjectTheInformerHasNotShown: the periodic pass hands
// Settle a record it listed as never seen; by the time Settle runs, the informer
// may have shown the object or the record may be gone. Neither needs a read.
func TestSettleReadsOnlyAnObjectTheInformerHasNotShown(t *testing.T) {
	tests := []struct {
		name string
		// since changes the record after the pass listed it.
		since        func(t *testing.T, h *execHarness)
		wantReads    bool
		wantRecorded bool
	}{
		{name: "still never seen", since: func(*testing.T, *execHarness) {}, wantReads: true, wantRecorded: true},
		{
			name: "shown by the informer since",
			since: func(t *testing.T, h *execHarness) {
				h.actual.Observe(cache.Observation{Volume: testPV.Name, Node: testNode, VolumeAttachment: testVAName, UID: vaUID, Attached: true})
			},
			wantRecorded: true,
		},
		{
			name: "forgotten since",
			since: func(t *testing.T, h *execHarness) {
				h.actual.Forget(testVAName, "")
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, time.Minute, attachedObject())
			h.actual.BeginCreate(testPV.Name, testNode, testVAName, false)
			listed, _ := h.actual.Object(testVAName)
			tc.since(t, h)
			h.exec.Settle(t.Context(), listed)
			if got := h.reads() > 0; got != tc.wantReads {
				t.Errorf("read the VolumeAttachment = %v (%d reads), want %v", got, h.reads(), tc.wantReads)
			}
			if _, ok := h.actual.Object(testVAName); ok != tc.wantRecorded {
				t.Errorf("recorded = %v, want %v", ok, tc.wantRecorded)
			}
		})
	}
}

// TestARecordTheInformerShowsDuringTheReadIsKept: Settle reads a never-seen
// object and the API server does not have it; meanwhile the informer showed an
// object of that name. The record is then the informer's to forget, when it
// delivers the deletion, not Settle's.
func TestARecordTheInformerShowsDuringTheReadIsKept(t *testing.T) {
	h := newExecHarness(t, time.Minute)
	h.actual.BeginCreate(testPV.Name, testNode, testVAName, false)
	listed, _ := h.actual.Object(testVAName)
	h.client.PrependReactor("get", "volumeattachments", func(clienttesting.Action) (bool, runtime.Object, error) {
		h.actual.Observe(cache.Observation{Volume: testPV.Name, Node: testNode, VolumeAttachment: testVAName, UID: vaUID, Attached: true})
		return true, nil, apierrors.NewNotFound(storagev1.Resource("volumeattachments"), testVAName)
	})
	h.exec.Settle(t.Context(), listed)
	if h.reads() != 1 {
		t.Fatalf("setup: %d reads, want 1", h.reads())
	}
	if att, ok := h.actual.Object(testVAName); !ok || !att.Seen {
		t.Errorf("record after the read = %+v, %v; want the one the informer shows", att, ok)
	}
}
