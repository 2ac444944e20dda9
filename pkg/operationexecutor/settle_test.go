package operationexecutor

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// Settle reads what only the API server can settle, and records what it learns.
func TestSettle(t *testing.T) {
	lost := apierrors.NewInternalError(errors.New("etcd leader changed"))
	tests := []struct {
		name string
		// setup leaves one record of testPV on testNode to settle.
		setup         func(t *testing.T, h *execHarness)
		running       bool
		wantRecorded  bool
		wantDeleting  bool
		wantUnsettled bool
	}{
		{
			name: "create never seen, object absent: forgotten",
			setup: func(t *testing.T, h *execHarness) {
				h.actual.BeginCreate(testPV.Name, testNode, vaName(testNode), false)
			},
			wantRecorded: false,
		},
		{
			name: "create never seen, object exists: kept",
			setup: func(t *testing.T, h *execHarness) {
				h.actual.BeginCreate(testPV.Name, testNode, vaName(testNode), false)
				if err := h.client.Tracker().Add(objectOn(vaName(testNode), testNode, vaUID)); err != nil {
					t.Fatal(err)
				}
			},
			wantRecorded: true,
		},
		{
			name: "create never seen, an operation on it runs: left to the operation",
			setup: func(t *testing.T, h *execHarness) {
				h.actual.BeginCreate(testPV.Name, testNode, vaName(testNode), false)
			},
			running:      true,
			wantRecorded: true,
		},
		{
			name: "delete of unknown outcome, the delete took effect: deleting",
			setup: func(t *testing.T, h *execHarness) {
				h.addAttached(t, vaName(testNode), testNode, vaUID, false)
				h.actual.SetDeleteUnsettled(vaName(testNode), vaUID, true)
				if err := h.client.Tracker().Delete(vaResource, "", vaName(testNode)); err != nil {
					t.Fatal(err)
				}
			},
			wantRecorded: true, wantDeleting: true,
		},
		{
			name: "delete of unknown outcome, the object is untouched: settled, not deleting",
			setup: func(t *testing.T, h *execHarness) {
				h.addAttached(t, vaName(testNode), testNode, vaUID, false)
				h.actual.SetDeleteUnsettled(vaName(testNode), vaUID, true)
			},
			wantRecorded: true,
		},
		{
			name: "delete of unknown outcome, an operation on it runs: left to the operation",
			setup: func(t *testing.T, h *execHarness) {
				h.addAttached(t, vaName(testNode), testNode, vaUID, false)
				h.actual.SetDeleteUnsettled(vaName(testNode), vaUID, true)
				if err := h.client.Tracker().Delete(vaResource, "", vaName(testNode)); err != nil {
					t.Fatal(err)
				}
			},
			running:      true,
			wantRecorded: true, wantUnsettled: true,
		},
		{
			name: "delete of unknown outcome, the object was replaced by a new one: deleting",
			setup: func(t *testing.T, h *execHarness) {
				h.addAttached(t, vaName(testNode), testNode, vaUID, false)
				h.actual.SetDeleteUnsettled(vaName(testNode), vaUID, true)
				if err := h.client.Tracker().Delete(vaResource, "", vaName(testNode)); err != nil {
					t.Fatal(err)
				}
				if err := h.client.Tracker().Add(objectOn(vaName(testNode), testNode, "new-uid")); err != nil {
					t.Fatal(err)
				}
			},
			wantRecorded: true, wantDeleting: true,
		},
		{
			name: "delete of unknown outcome of an object whose UID was never learned, untouched: settled, not deleting",
			setup: func(t *testing.T, h *execHarness) {
				h.actual.BeginCreate(testPV.Name, testNode, vaName(testNode), false)
				h.actual.SetDeleteUnsettled(vaName(testNode), "", true)
				if err := h.client.Tracker().Add(objectOn(vaName(testNode), testNode, vaUID)); err != nil {
					t.Fatal(err)
				}
			},
			wantRecorded: true,
		},
		{
			name: "delete of unknown outcome, the read fails too: still unsettled",
			setup: func(t *testing.T, h *execHarness) {
				h.addAttached(t, vaName(testNode), testNode, vaUID, false)
				h.actual.SetDeleteUnsettled(vaName(testNode), vaUID, true)
				h.getErr = lost
			},
			wantRecorded: true, wantUnsettled: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, 300*time.Millisecond)
			tc.setup(t, h)
			att, _ := h.actual.Object(vaName(testNode))
			if tc.running {
				key := lockFor(att.Volume, att.Node, att.MultiAttach)
				if !h.exec.locks.tryAcquire(key) {
					t.Fatal("lock taken")
				}
				defer h.exec.locks.free(key)
			}
			h.exec.Settle(t.Context(), att)
			got, recorded := h.actual.Object(vaName(testNode))
			if recorded != tc.wantRecorded {
				t.Fatalf("recorded = %v, want %v", recorded, tc.wantRecorded)
			}
			if !recorded {
				return
			}
			if got.Deleting != tc.wantDeleting {
				t.Errorf("Deleting = %v, want %v", got.Deleting, tc.wantDeleting)
			}
			if got.DeleteUnsettled != tc.wantUnsettled {
				t.Errorf("DeleteUnsettled = %v, want %v", got.DeleteUnsettled, tc.wantUnsettled)
			}
			if _, err := h.client.StorageV1().VolumeAttachments().Get(t.Context(), vaName(testNode), metav1.GetOptions{}); err == nil && !tc.wantRecorded {
				t.Error("object exists but was forgotten")
			}
		})
	}
}

// TestSettleLogsAnErrorOnlyWhenTheReadFails: Settle tells the operator when it
// could not learn the outcome of a delete, and only then: not when it learned
// it, nor when it left the object to an operation that runs.
func TestSettleLogsAnErrorOnlyWhenTheReadFails(t *testing.T) {
	const message = "Reading a VolumeAttachment to learn whether its delete took effect"
	tests := []struct {
		name      string
		readFails bool
		running   bool
		wantError bool
	}{
		{name: "read back", wantError: false},
		{name: "the read fails", readFails: true, wantError: true},
		{name: "an operation on the volume runs", running: true, wantError: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, 300*time.Millisecond)
			att := h.unsettledRecord(t, vaUID)
			if tc.readFails {
				h.getErr = apierrors.NewInternalError(errors.New("etcd leader changed"))
			}
			if tc.running {
				key := lockFor(att.Volume, att.Node, att.MultiAttach)
				if !h.exec.locks.tryAcquire(key) {
					t.Fatal("lock taken")
				}
				defer h.exec.locks.free(key)
			}
			ctx, logged := loggingContext(t)
			h.exec.Settle(ctx, att)
			var want []string
			if tc.wantError {
				want = []string{message}
			}
			if got := logged()[ktesting.LogError]; !slices.Equal(got, want) {
				t.Errorf("errors logged %q, want %q", got, want)
			}
		})
	}
}

// TestUnsettledDeleteIsReadBackByItsOwnRetry: a delete got no answer, and the
// read meant to learn its outcome failed too. Nothing but a read from the API
// server can settle it, and the periodic pass may be off
// (--disable-attach-detach-reconcile-sync): the executor reads it back by
// itself, with backoff, until the API server answers, and has the volume
// reconciled again. Before, the record stayed "maybe deleting" until the
// periodic pass read it, and with the pass off, a VolumeAttachment whose delete
// never took effect stayed attached for good.
func TestUnsettledDeleteIsReadBackByItsOwnRetry(t *testing.T) {
	lost := apierrors.NewInternalError(errors.New("etcd leader changed"))
	tests := []struct {
		name string
		// applied: the API server carried out the delete.
		applied      bool
		wantDeleting bool
	}{
		{name: "the delete never took effect: settled, not deleting", applied: false},
		{name: "the delete took effect: settled, deleting", applied: true, wantDeleting: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, on := newDetachHarness(t, 300*time.Millisecond)
			h.deleteErr = lost
			h.deleteApplies = tc.applied
			h.getErr = lost
			if err := h.exec.Detach(t.Context(), on, cache.NotForced); err != nil {
				t.Fatalf("Detach: %v", err)
			}
			h.waitDone(t)
			if got := h.onNode(t, testNode); !got.Objects[0].DeleteUnsettled || !got.HiddenFromNodeStatus {
				t.Fatalf("setup: after a delete and a read that both failed: %+v, want unsettled and hidden", got)
			}

			// The API server answers reads again; no periodic pass runs.
			h.mu.Lock()
			h.getErr = nil
			h.mu.Unlock()
			deadline := time.Now().Add(waitLimit)
			for h.onNode(t, testNode).Objects[0].DeleteUnsettled {
				if time.Now().After(deadline) {
					t.Fatalf("delete still unsettled %s after the API server answers reads again: only the periodic pass would read it", waitLimit)
				}
				time.Sleep(10 * time.Millisecond)
			}
			h.waitDone(t)
			got := h.onNode(t, testNode)
			if got.Objects[0].DeleteUnsettled || got.Objects[0].Deleting != tc.wantDeleting {
				t.Errorf("record once the API server answers = %+v, want settled, deleting %v", got.Objects[0], tc.wantDeleting)
			}
			if !got.HiddenFromNodeStatus {
				t.Errorf("record once settled = %+v, want still hidden until the volume is reconciled", got)
			}
			if n := h.deleteCount(); n != 1 {
				t.Errorf("%d deletes, want 1: settling reads, it does not delete", n)
			}
		})
	}
}

// unsettledRecord records testPV attached on testNode with a delete of unknown
// outcome, and returns the record.
func (h *execHarness) unsettledRecord(t *testing.T, uid types.UID) cache.Attachment {
	t.Helper()
	h.addAttached(t, vaName(testNode), testNode, uid, false)
	h.actual.SetDeleteUnsettled(vaName(testNode), uid, true)
	att, _ := h.actual.Object(vaName(testNode))
	return att
}

// waitForTheRetry waits until the executor's goroutines, the retry among them,
// have ended.
func (h *execHarness) waitForTheRetry(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	if err := h.exec.Wait(ctx); err != nil {
		t.Fatalf("the retry did not end: %v", err)
	}
}

// TestARetryReadsBackOnlyWhileItsDeleteIsUnsettled: the retry that reads back a
// delete of unknown outcome stops, without a read, once the outcome is known
// otherwise (the periodic pass or the informer settled it), once the record is
// gone, and once the object is another one, whose delete has a retry of its own.
func TestARetryReadsBackOnlyWhileItsDeleteIsUnsettled(t *testing.T) {
	tests := []struct {
		name string
		// since changes the record after the retry was started.
		since          func(t *testing.T, h *execHarness)
		wantReads      int
		wantUnsettled  bool
		wantRecordedAs types.UID
	}{
		{name: "still unsettled: read back and settled", since: func(*testing.T, *execHarness) {}, wantReads: 1, wantRecordedAs: vaUID},
		{
			name: "settled since by something else",
			since: func(t *testing.T, h *execHarness) {
				h.actual.SetDeleteUnsettled(vaName(testNode), vaUID, false)
			},
			wantRecordedAs: vaUID,
		},
		{
			name:  "forgotten since",
			since: func(t *testing.T, h *execHarness) { h.actual.Forget(vaName(testNode), "") },
		},
		{
			name: "replaced since by another object, whose delete is also of unknown outcome",
			since: func(t *testing.T, h *execHarness) {
				h.actual.Forget(vaName(testNode), "")
				if err := h.client.Tracker().Delete(vaResource, "", vaName(testNode)); err != nil {
					t.Fatal(err)
				}
				h.unsettledRecord(t, "new-uid")
			},
			wantUnsettled: true, wantRecordedAs: "new-uid",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, time.Minute)
			att := h.unsettledRecord(t, vaUID)
			h.exec.retrySettle(t.Context(), att)
			tc.since(t, h)
			h.waitForTheRetry(t)
			if got := h.reads(); got != tc.wantReads {
				t.Errorf("%d reads, want %d", got, tc.wantReads)
			}
			got, ok := h.actual.Object(vaName(testNode))
			switch {
			case tc.wantRecordedAs == "":
				if ok {
					t.Errorf("record %+v, want none", got)
				}
			case !ok || got.UID != tc.wantRecordedAs || got.DeleteUnsettled != tc.wantUnsettled:
				t.Errorf("record %+v, %v; want uid %s, unsettled %v", got, ok, tc.wantRecordedAs, tc.wantUnsettled)
			}
		})
	}
}

// TestNoRetryStartsOnceTheExecutorStops: once Wait was called, or the
// controller's context has ended, a delete of unknown outcome gets no retry: the
// shutdown waits for no read, and the next leader settles the record from what
// it lists.
func TestNoRetryStartsOnceTheExecutorStops(t *testing.T) {
	for _, tc := range []struct {
		name          string
		ended, waited bool
	}{
		{name: "Wait called, context alive", waited: true},
		{name: "context ended", ended: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, time.Minute)
			att := h.unsettledRecord(t, vaUID)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tc.ended {
				cancel()
			}
			if tc.waited {
				h.waitForTheRetry(t)
			}
			h.exec.retrySettle(ctx, att)
			h.exec.mu.Lock()
			started := h.exec.settling[att.VolumeAttachment]
			h.exec.mu.Unlock()
			if started {
				t.Error("a retry started after the stop")
			}
		})
	}
}

// TestOneRetryAtATimeForAnObject: a second retry asked for an object whose
// retry runs starts nothing. (Two would not read at once, as each read holds
// the volume's lock, but the second would find the lock taken by the first and
// go on, with backoff, as if the outcome were still unknown.)
func TestOneRetryAtATimeForAnObject(t *testing.T) {
	h := newExecHarness(t, time.Minute)
	att := h.unsettledRecord(t, vaUID)
	reading := make(chan struct{}, 2)
	release := make(chan struct{})
	h.client.PrependReactor("get", "volumeattachments", func(clienttesting.Action) (bool, runtime.Object, error) {
		reading <- struct{}{}
		<-release
		return false, nil, nil
	})
	ctx, logged := loggingContext(t)
	h.exec.retrySettle(ctx, att)
	h.exec.retrySettle(ctx, att)
	select {
	case <-reading:
	case <-time.After(waitLimit):
		t.Fatal("the retry never read the object")
	}
	// A second retry, started with the first, would have had its turn by now.
	select {
	case <-reading:
		t.Error("a second read of the object while the first is under way")
	case <-time.After(time.Second):
	}
	close(release)
	h.waitForTheRetry(t)
	if got, _ := h.actual.Object(vaName(testNode)); got.DeleteUnsettled {
		t.Errorf("record %+v, want settled", got)
	}
	want := []string{"Settled a delete by reading the VolumeAttachment back"}
	if got := logged()[ktesting.LogInfo]; !slices.Equal(got, want) {
		t.Errorf("logged %q, want %q: one retry, whose first read settled the delete", got, want)
	}
}

// TestARetryEndsWithTheReadThatSettlesIt: the read that settles the delete is
// the retry's last; it says so in the log, and does not wait for another turn.
func TestARetryEndsWithTheReadThatSettlesIt(t *testing.T) {
	h := newExecHarness(t, time.Minute)
	att := h.unsettledRecord(t, vaUID)
	ctx, logged := loggingContext(t)
	h.exec.retrySettle(ctx, att)
	h.waitForTheRetry(t)
	if h.reads() != 1 {
		t.Errorf("%d reads, want 1", h.reads())
	}
	want := []string{"Settled a delete by reading the VolumeAttachment back"}
	if got := logged()[ktesting.LogInfo]; !slices.Equal(got, want) {
		t.Errorf("logged %q, want %q", got, want)
	}
}
