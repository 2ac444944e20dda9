package operationexecutor

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

const (
	initialBackoff = 500 * time.Millisecond
	maxBackoff     = 2*time.Minute + 2*time.Second
)

// ErrPending means an operation that conflicts with the one asked for is running.
var ErrPending = errors.New("an operation on this volume is already running")

// BackoffError means the last operation of the same kind on the volume and node
// failed too recently; the next may start after Remaining.
type BackoffError struct {
	Remaining time.Duration
}

func (e *BackoffError) Error() string {
	return fmt.Sprintf("backing off after a failed operation, %s left", e.Remaining.Round(time.Millisecond))
}

// kind tells attaches from detaches: a failure of one does not delay the other.
type kind int

const (
	attachKind kind = iota
	detachKind
)

// lockKey is what one operation holds: a single-attach volume across the cluster
// (node empty), or a multi-attach volume on one node.
type lockKey struct {
	volume volumename.UniqueName
	node   string
}

// lockFor returns the key an operation on the volume and node holds.
func lockFor(volume volumename.UniqueName, node string, multiAttach bool) lockKey {
	if multiAttach {
		return lockKey{volume, node}
	}
	return lockKey{volume: volume}
}

func (k lockKey) wholeVolume() bool { return k.node == "" }

type pairKey struct {
	volume volumename.UniqueName
	node   string
}

type backoffEntry struct {
	kind  kind
	until time.Time
	delay time.Duration
}

// locks grants operations, one at a time per lock key, where a whole-volume key
// conflicts with every key of the volume, and keeps an exponential backoff per
// volume, node and kind of operation after a failure.
type locks struct {
	mu      sync.Mutex
	running map[volumename.UniqueName]map[string]struct{}
	backoff map[pairKey]backoffEntry
	now     func() time.Time
}

func newLocks(now func() time.Time) *locks {
	return &locks{
		running: make(map[volumename.UniqueName]map[string]struct{}),
		backoff: make(map[pairKey]backoffEntry),
		now:     now,
	}
}

// acquire takes key for an operation of kind k on the volume and node, unless a
// conflicting operation runs or the last one of the same kind failed too recently.
// A backoff left by the other kind is dropped: it was about something else.
func (l *locks) acquire(key lockKey, node string, k kind) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conflictsLocked(key) {
		return ErrPending
	}
	pk := pairKey{key.volume, node}
	if b, ok := l.backoff[pk]; ok {
		if b.kind != k {
			delete(l.backoff, pk)
		} else if remaining := b.until.Sub(l.now()); remaining > 0 {
			return &BackoffError{Remaining: remaining}
		}
	}
	l.takeLocked(key)
	return nil
}

// tryAcquire takes key unless a conflicting operation runs, whatever the backoff.
func (l *locks) tryAcquire(key lockKey) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conflictsLocked(key) {
		return false
	}
	l.takeLocked(key)
	return true
}

func (l *locks) conflictsLocked(key lockKey) bool {
	held := l.running[key.volume]
	_, whole := held[""]
	_, same := held[key.node]
	return whole || same || key.wholeVolume() && len(held) > 0
}

func (l *locks) takeLocked(key lockKey) {
	held := l.running[key.volume]
	if held == nil {
		held = make(map[string]struct{})
		l.running[key.volume] = held
	}
	held[key.node] = struct{}{}
}

// free releases key without touching the backoff: the operation never started.
func (l *locks) free(key lockKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.freeLocked(key)
}

func (l *locks) freeLocked(key lockKey) {
	if held := l.running[key.volume]; held != nil {
		delete(held, key.node)
		if len(held) == 0 {
			delete(l.running, key.volume)
		}
	}
}

// release frees key and records the outcome for the backoff.
func (l *locks) release(key lockKey, node string, k kind, failed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.freeLocked(key)
	pk := pairKey{key.volume, node}
	if !failed {
		delete(l.backoff, pk)
		return
	}
	delay := initialBackoff
	if b, ok := l.backoff[pk]; ok && b.kind == k && l.now().Sub(b.until) <= maxBackoff {
		delay = min(2*b.delay, maxBackoff)
	}
	l.backoff[pk] = backoffEntry{kind: k, until: l.now().Add(delay), delay: delay}
}

// isRunning tells whether an operation on the volume runs that involves the node.
func (l *locks) isRunning(volume volumename.UniqueName, node string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	held := l.running[volume]
	_, whole := held[""]
	_, own := held[node]
	return whole || own
}

// backoffLeft returns how long the next operation of the kind that last failed on
// the volume and node must wait, and that kind; zero when none must.
func (l *locks) backoffLeft(volume volumename.UniqueName, node string) (time.Duration, kind) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.backoff[pairKey{volume, node}]
	if !ok {
		return 0, 0
	}
	return max(b.until.Sub(l.now()), 0), b.kind
}

// resetBackoff lets the next operation on the volume and node start at once. It
// reports whether the pair was backing off after a failed attach.
func (l *locks) resetBackoff(volume volumename.UniqueName, node string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	pk := pairKey{volume, node}
	b, ok := l.backoff[pk]
	delete(l.backoff, pk)
	return ok && b.kind == attachKind
}

// forgetExpired drops the backoff entries that ran out more than maxBackoff ago:
// the next failure starts from the initial delay anyway.
func (l *locks) forgetExpired() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	for pk, b := range l.backoff {
		if now.Sub(b.until) > maxBackoff {
			delete(l.backoff, pk)
		}
	}
}
