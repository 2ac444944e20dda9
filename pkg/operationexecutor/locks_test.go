package operationexecutor

import (
	"errors"
	"testing"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

var (
	vol1 = volumename.CSI("d", "vol-1")
	vol2 = volumename.CSI("d", "vol-2")
)

// lockReq is one acquire: of the volume on the node, for a single-attach volume
// (whole volume) or a multi-attach one (the node only).
type lockReq struct {
	vol   volumename.UniqueName
	node  string
	multi bool
}

func (r lockReq) key() lockKey { return lockFor(r.vol, r.node, r.multi) }

// anyRunning tells whether any operation on the volume holds a lock.
func anyRunning(l *locks, vol volumename.UniqueName) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.running[vol]) > 0
}

func TestLocksConflicts(t *testing.T) {
	tests := []struct {
		name    string
		held    []lockReq
		req     lockReq
		pending bool
	}{
		{"single-attach, free", nil, lockReq{vol1, "a", false}, false},
		{"single-attach, same node busy", []lockReq{{vol1, "a", false}}, lockReq{vol1, "a", false}, true},
		{"single-attach, other node busy", []lockReq{{vol1, "a", false}}, lockReq{vol1, "b", false}, true},
		{"single-attach, other volume busy", []lockReq{{vol2, "a", false}}, lockReq{vol1, "a", false}, false},
		{"multi-attach, other node busy", []lockReq{{vol1, "a", true}}, lockReq{vol1, "b", true}, false},
		{"multi-attach, same node busy", []lockReq{{vol1, "a", true}}, lockReq{vol1, "a", true}, true},
		{"whole-volume op blocks a node op", []lockReq{{vol1, "a", false}}, lockReq{vol1, "b", true}, true},
		{"node op blocks a whole-volume op", []lockReq{{vol1, "a", true}}, lockReq{vol1, "b", false}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLocks(time.Now)
			for _, h := range tc.held {
				if err := l.acquire(h.key(), h.node, attachKind); err != nil {
					t.Fatalf("setup acquire %+v: %v", h, err)
				}
			}
			err := l.acquire(tc.req.key(), tc.req.node, attachKind)
			if tc.pending != errors.Is(err, ErrPending) {
				t.Errorf("acquire() = %v, want pending %v", err, tc.pending)
			}
			if !tc.pending && err != nil {
				t.Errorf("acquire() = %v, want nil", err)
			}
		})
	}
}

func TestLocksReleaseAndRunning(t *testing.T) {
	l := newLocks(time.Now)
	if anyRunning(l, vol1) || l.isRunning(vol1, "a") {
		t.Fatal("running before any acquire")
	}
	if err := l.acquire(lockFor(vol1, "a", false), "a", attachKind); err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"a", "b"} {
		if !l.isRunning(vol1, node) {
			t.Errorf("isRunning(%s) = false while a whole-volume op runs", node)
		}
	}
	if !anyRunning(l, vol1) || anyRunning(l, vol2) {
		t.Errorf("anyRunning = %v/%v, want true for vol1 only", anyRunning(l, vol1), anyRunning(l, vol2))
	}
	l.release(lockFor(vol1, "a", false), "a", attachKind, false)
	if anyRunning(l, vol1) {
		t.Error("running after release")
	}

	if err := l.acquire(lockFor(vol1, "a", true), "a", attachKind); err != nil {
		t.Fatal(err)
	}
	if !l.isRunning(vol1, "a") || l.isRunning(vol1, "b") {
		t.Errorf("isRunning a/b = %v/%v with a node op on a, want true/false", l.isRunning(vol1, "a"), l.isRunning(vol1, "b"))
	}
	if err := l.acquire(lockFor(vol1, "b", true), "b", attachKind); err != nil {
		t.Fatal(err)
	}
	l.release(lockFor(vol1, "a", true), "a", attachKind, false)
	if !anyRunning(l, vol1) || !l.isRunning(vol1, "b") {
		t.Error("op on b not running after releasing a")
	}
	if err := l.acquire(lockFor(vol1, "a", false), "a", attachKind); !errors.Is(err, ErrPending) {
		t.Errorf("whole-volume acquire with b running = %v, want ErrPending", err)
	}
	l.release(lockFor(vol1, "b", true), "b", attachKind, false)
	if err := l.acquire(lockFor(vol1, "a", false), "a", attachKind); err != nil {
		t.Errorf("whole-volume acquire once free = %v", err)
	}
}

func TestLocksBackoff(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newLocks(func() time.Time { return now })
	fail := func() {
		t.Helper()
		if err := l.acquire(lockFor(vol1, "a", false), "a", attachKind); err != nil {
			t.Fatalf("acquire: %v", err)
		}
		l.release(lockFor(vol1, "a", false), "a", attachKind, true)
	}
	wantDelays := []time.Duration{
		500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
		16 * time.Second, 32 * time.Second, 64 * time.Second, maxBackoff, maxBackoff,
	}
	for i, want := range wantDelays {
		fail()
		err := l.acquire(lockFor(vol1, "a", false), "a", attachKind)
		var backoff *BackoffError
		if !errors.As(err, &backoff) || backoff.Remaining != want {
			t.Fatalf("failure %d: acquire() = %v, want backoff %v", i+1, err, want)
		}
		now = now.Add(want - time.Millisecond)
		if err := l.acquire(lockFor(vol1, "a", false), "a", attachKind); !errors.As(err, &backoff) || backoff.Remaining != time.Millisecond {
			t.Fatalf("failure %d: acquire() 1ms early = %v, want 1ms of backoff left", i+1, err)
		}
		now = now.Add(time.Millisecond)
	}
	if maxBackoff != 2*time.Minute+2*time.Second {
		t.Errorf("maxBackoff = %v, want 2m2s", maxBackoff)
	}

	if err := l.acquire(lockFor(vol1, "b", false), "b", attachKind); err != nil {
		t.Errorf("other node backing off: %v", err)
	}
	l.release(lockFor(vol1, "b", false), "b", attachKind, false)

	if err := l.acquire(lockFor(vol1, "a", false), "a", attachKind); err != nil {
		t.Fatal(err)
	}
	l.release(lockFor(vol1, "a", false), "a", attachKind, false)
	fail()
	var backoff *BackoffError
	if err := l.acquire(lockFor(vol1, "a", false), "a", attachKind); !errors.As(err, &backoff) || backoff.Remaining != initialBackoff {
		t.Errorf("after a success a failure backs off %v, want the initial %v", err, initialBackoff)
	}
}

func TestLocksResetBackoff(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newLocks(func() time.Time { return now })
	if l.resetBackoff(vol1, "a") {
		t.Error("resetBackoff() = true with no backoff")
	}
	for range 3 {
		now = now.Add(time.Minute)
		if err := l.acquire(lockFor(vol1, "a", true), "a", attachKind); err != nil {
			t.Fatal(err)
		}
		l.release(lockFor(vol1, "a", true), "a", attachKind, true)
	}
	if !l.resetBackoff(vol1, "a") {
		t.Error("resetBackoff() = false while backing off")
	}
	if err := l.acquire(lockFor(vol1, "a", true), "a", attachKind); err != nil {
		t.Fatalf("acquire after reset: %v", err)
	}
	l.release(lockFor(vol1, "a", true), "a", attachKind, true)
	var backoff *BackoffError
	if err := l.acquire(lockFor(vol1, "a", true), "a", attachKind); !errors.As(err, &backoff) || backoff.Remaining != initialBackoff {
		t.Errorf("failure after reset backs off %v, want the initial %v", err, initialBackoff)
	}
}

// TestBackoffLeftTellsTheWaitAndKindOfTheLastFailure: what an explanation shows of
// a backoff.
func TestBackoffLeftTellsTheWaitAndKindOfTheLastFailure(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newLocks(func() time.Time { return now })
	if left, k := l.backoffLeft(vol1, "a"); left != 0 || k != 0 {
		t.Errorf("backoffLeft with no failure = %v, %v; want none", left, k)
	}
	for _, kind := range []kind{attachKind, detachKind} {
		if err := l.acquire(lockFor(vol1, "a", false), "a", kind); err != nil {
			t.Fatalf("acquire: %v", err)
		}
		l.release(lockFor(vol1, "a", false), "a", kind, true)
		now = now.Add(100 * time.Millisecond)
		if left, k := l.backoffLeft(vol1, "a"); left != initialBackoff-100*time.Millisecond || k != kind {
			t.Errorf("backoffLeft after a failed %v = %v, %v; want %v, %v", kind, left, k, initialBackoff-100*time.Millisecond, kind)
		}
		now = now.Add(initialBackoff)
		if left, _ := l.backoffLeft(vol1, "a"); left != 0 {
			t.Errorf("backoffLeft once the backoff ran out = %v, want 0", left)
		}
	}
}
