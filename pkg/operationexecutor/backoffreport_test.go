package operationexecutor

import (
	"testing"
	"time"
)

// TestBackoffTellsHowLongAndWhichKindOfOperationWaits: the explanation of a
// volume names the wait after a failure, and whether it was an attach or a
// detach that failed; once the wait has run out, or when nothing failed, there
// is nothing to tell.
func TestBackoffTellsHowLongAndWhichKindOfOperationWaits(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		// failed is the kind of the operation that failed at start; nil: none.
		failed   *kind
		at       time.Duration
		wantLeft time.Duration
		wantKind string
	}{
		{name: "nothing failed", at: 0},
		{name: "an attach failed", failed: new(attachKind), at: 100 * time.Millisecond, wantLeft: initialBackoff - 100*time.Millisecond, wantKind: "attach"},
		{name: "a detach failed", failed: new(detachKind), at: 100 * time.Millisecond, wantLeft: initialBackoff - 100*time.Millisecond, wantKind: "detach"},
		{name: "an attach failed, its wait has run out", failed: new(attachKind), at: initialBackoff},
		{name: "a detach failed, its wait has run out", failed: new(detachKind), at: time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now := start
			e := New(Config{})
			e.locks = newLocks(func() time.Time { return now })
			if tc.failed != nil {
				key := lockFor(vol1, "a", false)
				if err := e.locks.acquire(key, "a", *tc.failed); err != nil {
					t.Fatal(err)
				}
				e.locks.release(key, "a", *tc.failed, true)
			}
			now = start.Add(tc.at)
			left, k := e.Backoff(vol1, "a")
			if left != tc.wantLeft || k != tc.wantKind {
				t.Errorf("Backoff = %v, %q; want %v, %q", left, k, tc.wantLeft, tc.wantKind)
			}
		})
	}
}
