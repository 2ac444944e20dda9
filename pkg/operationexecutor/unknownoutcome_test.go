package operationexecutor

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clienttesting "k8s.io/client-go/testing"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// connectionReset stands for a request whose answer never came back.
var connectionReset = fmt.Errorf("Post \"https://apiserver/apis/storage.k8s.io/v1/volumeattachments\": %w", io.ErrUnexpectedEOF)

// TestAttachCreateOfUnknownOutcomeKeepsTheHolder: a create the API server may have
// carried out counts as existing, so that no other node gets a single-attach
// volume meanwhile; a create the API server refused is forgotten.
func TestAttachCreateOfUnknownOutcomeKeepsTheHolder(t *testing.T) {
	invalid := apierrors.NewInvalid(storagev1.SchemeGroupVersion.WithKind("VolumeAttachment").GroupKind(), testVAName,
		field.ErrorList{field.Required(field.NewPath("spec", "attacher"), "")})
	tests := []struct {
		name string
		err  error
		// applied: the API server created the object before the answer was lost.
		applied bool
		// readFails: the reads that would settle the outcome fail too.
		readFails bool
		wantKept  bool
	}{
		{name: "500, created", err: apierrors.NewInternalError(errors.New("etcd leader changed")), applied: true, wantKept: true},
		{name: "500, not created, not read back yet", err: apierrors.NewInternalError(errors.New("etcd leader changed")), readFails: true, wantKept: true},
		{name: "connection lost, created", err: connectionReset, applied: true, wantKept: true},
		{name: "server timeout, created", err: apierrors.NewTimeoutError("request did not complete within 60s", 1), applied: true, wantKept: true},
		{name: "503, not read back yet", err: apierrors.NewServiceUnavailable("shutting down"), readFails: true, wantKept: true},
		{name: "422 Invalid", err: invalid},
		{name: "429 TooManyRequests", err: apierrors.NewTooManyRequests("slow down", 1)},
		{name: "403 Forbidden", err: apierrors.NewForbidden(storagev1.Resource("volumeattachments"), testVAName, errors.New("denied"))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, time.Minute)
			h.informerSeesCreates = true
			h.createErr = tc.err
			h.createApplies = tc.applied
			if tc.readFails {
				h.getErr = apierrors.NewInternalError(errors.New("etcd leader changed"))
			}
			if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
				t.Fatalf("Attach: %v", err)
			}
			h.waitDone(t)
			if got := h.events(); len(got) != 1 || !strings.HasPrefix(got[0], "Warning FailedAttachVolume") {
				t.Errorf("events = %q, want one FailedAttachVolume", got)
			}
			if !h.backingOff(testPV.Name, testNode) {
				t.Error("no backoff after a failed create")
			}
			att, kept := h.actual.Object(testVAName)
			if kept != tc.wantKept {
				t.Fatalf("record of the object kept = %v, want %v", kept, tc.wantKept)
			}
			if kept && (att.Seen || att.UID != "") {
				t.Errorf("record = %+v, want an unseen object without UID", att)
			}
			h.mu.Lock()
			h.createErr = nil
			h.mu.Unlock()
			err := h.exec.Attach(t.Context(), testPV, otherNode, testPods)
			if tc.wantKept {
				h.wantHeld(t, err, otherNode, testNode)
				return
			}
			if err != nil {
				t.Fatalf("Attach to %s after a refused create = %v, want it started", otherNode, err)
			}
			h.waitWaiting(t, vaName(otherNode))
		})
	}
}

// TestAttachCreateOfUnknownOutcomeIsReadBack: after a create of unknown outcome
// the executor reads the object back until a read answers, with nothing else to
// start it: no attach follows once the node no longer needs the volume, and the
// periodic pass may be off. The record of an object the API server does not have
// goes, and the volume is reconciled again; an object it has stays recorded.
func TestAttachCreateOfUnknownOutcomeIsReadBack(t *testing.T) {
	tests := []struct {
		name     string
		applied  bool
		wantKept bool
	}{
		{name: "not created", wantKept: false},
		{name: "created", applied: true, wantKept: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, time.Minute)
			h.createErr = apierrors.NewTimeoutError("request did not complete within 60s", 1)
			h.createApplies = tc.applied
			h.getErr = apierrors.NewInternalError(errors.New("etcd leader changed"))
			if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
				t.Fatalf("Attach: %v", err)
			}
			h.waitDone(t)
			if _, kept := h.actual.Object(testVAName); !kept {
				t.Fatal("record forgotten before any read answered")
			}
			h.mu.Lock()
			h.getErr = nil
			h.mu.Unlock()
			deadline := time.Now().Add(waitLimit)
			for h.settlingAny() && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if h.settlingAny() {
				t.Fatal("still reading the object back")
			}
			att, kept := h.actual.Object(testVAName)
			if kept != tc.wantKept {
				t.Fatalf("record kept = %v, want %v", kept, tc.wantKept)
			}
			if kept && att.Seen {
				t.Errorf("record = %+v, want it unseen until the informer shows it", att)
			}
			if !tc.wantKept {
				h.waitDone(t)
			}
		})
	}
}

// TestAttachThatNeverSawItsObjectSettlesTheRecord: when the wait ends and the
// informer never showed the object, the API server is asked; only an object it
// does not have is forgotten.
func TestAttachThatNeverSawItsObjectSettlesTheRecord(t *testing.T) {
	tests := []struct {
		name     string
		gone     bool
		getErr   error
		wantKept bool
	}{
		{name: "gone from the API server", gone: true},
		{name: "still on the API server", wantKept: true},
		{name: "the read fails", gone: true, getErr: apierrors.NewInternalError(errors.New("boom")), wantKept: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, 100*time.Millisecond)
			h.getErr = tc.getErr
			if tc.gone {
				// Created, and deleted by someone else before the informer
				// showed it.
				h.client.PrependReactor("create", "volumeattachments", func(a clienttesting.Action) (bool, runtime.Object, error) {
					va := a.(clienttesting.CreateAction).GetObject().(*storagev1.VolumeAttachment).DeepCopy()
					va.UID = vaUID
					return true, va, nil
				})
			}
			if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
				t.Fatalf("Attach: %v", err)
			}
			h.waitDone(t)
			if got := h.events(); len(got) != 1 || !strings.Contains(got[0], "timed out") {
				t.Errorf("events = %q, want the attach to time out", got)
			}
			if _, kept := h.actual.Object(testVAName); kept != tc.wantKept {
				t.Errorf("record kept = %v, want %v", kept, tc.wantKept)
			}
		})
	}
}

// TestDetachDeleteOfUnknownOutcomeIsSettledByReadingBack: a delete whose answer
// was lost is settled by reading the object; while that cannot be learned the
// volume stays out of node status.
func TestDetachDeleteOfUnknownOutcomeIsSettledByReadingBack(t *testing.T) {
	internal := apierrors.NewInternalError(errors.New("etcd leader changed"))
	tests := []struct {
		name      string
		deleteErr error
		// applied: the API server deleted the object; finalizer: it only set
		// the deletionTimestamp, a finalizer keeps the object.
		applied, finalizer bool
		getErr             error
		// wantSettled: the delete is known to have taken effect, and the
		// operation waits for the object to go.
		wantSettled bool
		// wantHidden: the detach failed and the volume stays out of node status.
		wantHidden bool
	}{
		{name: "500, deleted: read finds it gone", deleteErr: internal, applied: true, wantSettled: true},
		{name: "connection lost, deleted: read finds it gone", deleteErr: connectionReset, applied: true, wantSettled: true},
		{name: "server timeout, deleted: read finds it gone", deleteErr: apierrors.NewTimeoutError("slow", 1), applied: true, wantSettled: true},
		{name: "500, finalizer: read finds it being deleted", deleteErr: internal, finalizer: true, wantSettled: true},
		{name: "500, not deleted: read finds it unchanged", deleteErr: internal},
		{name: "500, deleted, read fails too: stays hidden", deleteErr: internal, applied: true, getErr: internal, wantHidden: true},
		{name: "connection lost, not deleted, read fails too: stays hidden", deleteErr: connectionReset, getErr: connectionReset, wantHidden: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, on := newDetachHarness(t, 2*time.Second)
			h.deleteErr = tc.deleteErr
			h.deleteApplies = tc.applied
			h.getErr = tc.getErr
			if tc.finalizer {
				h.client.PrependReactor("delete", "volumeattachments", func(clienttesting.Action) (bool, runtime.Object, error) {
					h.log.add("delete " + testVAName)
					now := metav1.Now()
					va := withStatus(attachedObject(), func(va *storagev1.VolumeAttachment) {
						va.DeletionTimestamp = &now
						va.Finalizers = []string{"external-attacher/" + testDriver}
					})
					if err := h.client.Tracker().Update(vaResource, va, ""); err != nil {
						t.Error(err)
					}
					return true, nil, internal
				})
			}
			if err := h.exec.Detach(t.Context(), on, cache.NotForced); err != nil {
				t.Fatalf("Detach: %v", err)
			}
			if tc.wantSettled {
				h.waitWaiting(t, testVAName)
				if got, _ := h.actual.Get(testPV.Name, testNode); !got.Deleting() || got.Reported() {
					t.Errorf("record once the delete is settled = %+v, want deleting and not reported", got)
				}
				h.exec.ObserveVolumeAttachment(testVAName, nil)
			}
			h.waitDone(t)
			if got, want := h.log.get(), []string{"confirm " + testNode, "delete " + testVAName}; !slices.Equal(got, want) {
				t.Errorf("requests = %q, want %q", got, want)
			}
			got, _ := h.actual.Get(testPV.Name, testNode)
			enqueued := h.status.enqueuedNodes()
			switch {
			case tc.wantSettled:
				if h.operations("detach", "success") != 1 {
					t.Error("the detach did not succeed")
				}
				if got.Reported() || len(enqueued) != 0 {
					t.Errorf("after the detach: %+v, enqueued %q; want not reported, nothing enqueued", got, enqueued)
				}
			case tc.wantHidden:
				if h.operations("detach", "error") != 1 {
					t.Error("the detach did not fail")
				}
				if len(got.Objects) != 1 || got.Objects[0].Deleting {
					t.Errorf("record %+v marked deleting though the outcome is unknown", got)
				}
				if !got.HiddenFromNodeStatus || got.Reported() || len(enqueued) != 0 {
					t.Errorf("after a delete of unknown outcome: %+v, enqueued %q; want the volume kept out of node status", got, enqueued)
				}
			default:
				if h.operations("detach", "error") != 1 {
					t.Error("the detach did not fail")
				}
				if got.Deleting() || !got.Reported() || !slices.Equal(enqueued, []string{testNode}) {
					t.Errorf("after a delete known to have failed: %+v, enqueued %q; want reported again and %s enqueued", got, enqueued, testNode)
				}
			}
		})
	}
}
