package operationexecutor

import (
	"errors"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
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
