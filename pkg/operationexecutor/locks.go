package operationexecutor

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/csivolume"
)

const (
	initialBackoff = 500 * time.Millisecond
	maxBackoff     = 2*time.Minute + 2*time.Second
)

// wholeVolume stands for every node: an operation on a single-attach volume holds
// the volume across the cluster.
const wholeVolume = ""

// ErrPending means an operation that conflicts with the one asked for is running.
var ErrPending = fmt.Errorf("an operation on this volume is already running")

// ErrInUse means a detach was called off because the node reported the volume in
// use after all.
var ErrInUse = errors.New("the node reports the volume in use; not detaching")

// BackoffError means the last operation on the volume and node failed too
// recently; the next may start after Remaining.
type BackoffError struct {
	Remaining time.Duration
}

func (e *BackoffError) Error() string {
	return fmt.Sprintf("backing off after a failed operation, %s left", e.Remaining.Round(time.Millisecond))
}

type backoffKey struct {
	volume csivolume.UniqueName
	node   string
}

type backoffEntry struct {
	until time.Time
	delay time.Duration
}

// locks grants operations: one at a time per volume for single-attach volumes
// (node wholeVolume), one per volume and node for the others, with exponential
// backoff per volume and node after a failure.
type locks struct {
	mu      sync.Mutex
	running map[csivolume.UniqueName]map[string]struct{}
	backoff map[backoffKey]backoffEntry
	now     func() time.Time
}

func newLocks(now func() time.Time) *locks {
	return &locks{
		running: make(map[csivolume.UniqueName]map[string]struct{}),
		backoff: make(map[backoffKey]backoffEntry),
		now:     now,
	}
}

// acquire takes the lock for an operation on the volume, on node (lockNode is
// wholeVolume for a single-attach volume), unless a conflicting operation runs or
// the pair is backing off.
func (l *locks) acquire(volume csivolume.UniqueName, node, lockNode string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	held := l.running[volume]
	if _, ok := held[wholeVolume]; ok {
		return ErrPending
	}
	if lockNode == wholeVolume && len(held) > 0 {
		return ErrPending
	}
	if _, ok := held[lockNode]; ok {
		return ErrPending
	}
	if b, ok := l.backoff[backoffKey{volume, node}]; ok {
		if remaining := b.until.Sub(l.now()); remaining > 0 {
			return &BackoffError{Remaining: remaining}
		}
	}
	if held == nil {
		held = make(map[string]struct{})
		l.running[volume] = held
	}
	held[lockNode] = struct{}{}
	return nil
}

// release frees the lock and records the outcome for the backoff.
func (l *locks) release(volume csivolume.UniqueName, node, lockNode string, failed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if held := l.running[volume]; held != nil {
		delete(held, lockNode)
		if len(held) == 0 {
			delete(l.running, volume)
		}
	}
	key := backoffKey{volume, node}
	if !failed {
		delete(l.backoff, key)
		return
	}
	delay := initialBackoff
	if b, ok := l.backoff[key]; ok {
		delay = min(2*b.delay, maxBackoff)
	}
	l.backoff[key] = backoffEntry{until: l.now().Add(delay), delay: delay}
}

// isRunning tells whether an operation on the volume runs that involves the node.
func (l *locks) isRunning(volume csivolume.UniqueName, node string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	held := l.running[volume]
	_, whole := held[wholeVolume]
	_, own := held[node]
	return whole || own
}

// anyRunning tells whether any operation on the volume runs.
func (l *locks) anyRunning(volume csivolume.UniqueName) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.running[volume]) > 0
}

// resetBackoff lets the next operation on the volume and node start at once.
func (l *locks) resetBackoff(volume csivolume.UniqueName, node string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := backoffKey{volume, node}
	_, ok := l.backoff[key]
	delete(l.backoff, key)
	return ok
}
