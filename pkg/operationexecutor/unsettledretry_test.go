package operationexecutor

import (
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

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
			if err := h.exec.Detach(t.Context(), on, NotForced); err != nil {
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
