package operationexecutor

import (
	"errors"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// TestAttachAndDetachDoNotShareOneBackoff guards against "attach and detach share
// one backoff": a failed attach must not delay the detach that follows when the
// pod goes away, nor a failed detach the attach of a pod that comes back.
func TestAttachAndDetachDoNotShareOneBackoff(t *testing.T) {
	t.Run("failed attach, then detach", func(t *testing.T) {
		h := newExecHarness(t, time.Minute)
		h.createErr = apierrors.NewInternalError(errors.New("etcd leader changed"))
		h.createApplies = true
		h.informerSeesDeletes = true
		if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
			t.Fatalf("Attach: %v", err)
		}
		h.waitDone(t)
		var backoff *BackoffError
		if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); !errors.As(err, &backoff) {
			t.Fatalf("Attach right after a failed attach = %v, want a BackoffError", err)
		}
		if err := h.exec.Detach(t.Context(), h.onNode(t, testNode), cache.NotForced); err != nil {
			t.Fatalf("Detach right after a failed attach = %v, want it started at once", err)
		}
		h.waitDone(t)
		if h.operations("detach", "success") != 1 {
			t.Error("the detach did not succeed")
		}
	})
	t.Run("failed detach, then attach", func(t *testing.T) {
		h, on := newDetachHarness(t, time.Minute)
		h.status.err = errors.New("node status patch refused")
		if err := h.exec.Detach(t.Context(), on, cache.NotForced); err != nil {
			t.Fatalf("Detach: %v", err)
		}
		h.waitDone(t)
		var backoff *BackoffError
		if err := h.exec.Detach(t.Context(), on, cache.NotForced); !errors.As(err, &backoff) {
			t.Fatalf("Detach right after a failed detach = %v, want a BackoffError", err)
		}
		if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
			t.Fatalf("Attach right after a failed detach = %v, want it started at once", err)
		}
		h.waitDone(t)
		if h.operations("attach", "success") != 1 {
			t.Error("the attach did not succeed")
		}
	})
}

// TestForgetExpiredDropsOldBackoffEntries guards against the leak of backoff
// entries: a pair that failed once and was never tried again is forgotten once
// its backoff ran out more than maxBackoff ago, and the rest are kept.
func TestForgetExpiredDropsOldBackoffEntries(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	l := newLocks(func() time.Time { return now })
	fail := func(vol volumename.UniqueName, node string, k kind) {
		t.Helper()
		key := lockFor(vol, node, true)
		if err := l.acquire(key, node, k); err != nil {
			t.Fatalf("acquire %s %s: %v", vol, node, err)
		}
		l.release(key, node, k, true)
	}
	fail(vol1, "a", attachKind) // until start+500ms
	fail(vol1, "b", detachKind) // until start+500ms
	now = start.Add(time.Minute)
	fail(vol2, "a", attachKind) // until start+1m+500ms
	if got := len(l.backoff); got != 3 {
		t.Fatalf("%d backoff entries, want 3", got)
	}

	// Exactly maxBackoff after the first two ran out: kept.
	now = start.Add(initialBackoff + maxBackoff)
	l.forgetExpired()
	if got := len(l.backoff); got != 3 {
		t.Errorf("%d backoff entries maxBackoff after they ran out, want 3", got)
	}
	now = now.Add(time.Millisecond)
	l.forgetExpired()
	if got := len(l.backoff); got != 1 {
		t.Errorf("%d backoff entries, want 1: only the recent failure", got)
	}
	now = now.Add(time.Minute)
	l.forgetExpired()
	if got := len(l.backoff); got != 0 {
		t.Errorf("%d backoff entries once all ran out long ago, want 0", got)
	}

	// Through the executor.
	h := newExecHarness(t, time.Minute)
	h.exec.locks.now = func() time.Time { return now }
	h.createErr = apierrors.NewForbidden(storagev1.Resource("volumeattachments"), testVAName, errors.New("denied"))
	if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
		t.Fatal(err)
	}
	h.waitDone(t)
	h.exec.ForgetExpired()
	if !h.backingOff(testPV.Name, testNode) {
		t.Fatal("a running backoff was forgotten")
	}
	now = now.Add(initialBackoff + maxBackoff + time.Millisecond)
	h.exec.ForgetExpired()
	if h.backingOff(testPV.Name, testNode) {
		t.Error("ForgetExpired kept a backoff that ran out long ago")
	}
}

// TestLocksBackoffIsPerKind: a failure delays the next operation of its own kind
// only; the other kind starts at once and drops it.
func TestLocksBackoffIsPerKind(t *testing.T) {
	for _, tc := range []struct {
		name        string
		failed, try kind
		wantBackoff bool
	}{
		{"attach failed, attach again", attachKind, attachKind, true},
		{"attach failed, detach", attachKind, detachKind, false},
		{"detach failed, attach", detachKind, attachKind, false},
		{"detach failed, detach again", detachKind, detachKind, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
			l := newLocks(func() time.Time { return now })
			key := lockFor(vol1, "a", false)
			for range 3 {
				if err := l.acquire(key, "a", tc.failed); err != nil {
					t.Fatal(err)
				}
				l.release(key, "a", tc.failed, true)
				now = now.Add(maxBackoff)
			}
			now = now.Add(-maxBackoff)
			err := l.acquire(key, "a", tc.try)
			var backoff *BackoffError
			if errors.As(err, &backoff) != tc.wantBackoff || (!tc.wantBackoff && err != nil) {
				t.Fatalf("acquire = %v, want backoff %v", err, tc.wantBackoff)
			}
			if tc.wantBackoff {
				return
			}
			// The other kind's failure starts from the initial delay, not from
			// where the first kind had got to.
			l.release(key, "a", tc.try, true)
			if err := l.acquire(key, "a", tc.try); !errors.As(err, &backoff) || backoff.Remaining != initialBackoff {
				t.Errorf("after a failure of the other kind acquire = %v, want the initial backoff %v", err, initialBackoff)
			}
			if got := l.resetBackoff(vol1, "a"); got != (tc.try == attachKind) {
				t.Errorf("resetBackoff = %v, want %v (true only after a failed attach)", got, tc.try == attachKind)
			}
		})
	}
}

// TestBackoffStartsAgainAfterAQuietPeriod: a failure long after the last one
// backs off from the initial delay again.
func TestBackoffStartsAgainAfterAQuietPeriod(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newLocks(func() time.Time { return now })
	key := lockFor(vol1, "a", false)
	fail := func() {
		t.Helper()
		if err := l.acquire(key, "a", attachKind); err != nil {
			t.Fatal(err)
		}
		l.release(key, "a", attachKind, true)
	}
	fail()
	now = now.Add(initialBackoff)
	fail() // 1s
	now = now.Add(time.Second + maxBackoff + time.Millisecond)
	fail()
	var backoff *BackoffError
	if err := l.acquire(key, "a", attachKind); !errors.As(err, &backoff) || backoff.Remaining != initialBackoff {
		t.Errorf("acquire = %v, want the initial backoff %v", err, initialBackoff)
	}
}
