// Package watchrecord records when an informer stops showing what happens, and
// when it shows it again: the controller's rules that rest on "nothing exists
// that the informer does not show" hold only while it does. It wraps the list
// and watch requests of the VolumeAttachment, pod and node informers; the rules
// that read the records are the controller's (VolumeAttachments, and the
// start-up check of all three) and the reconciler's (the wait for unmount).
package watchrecord

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
)

// Lapses counts the times an informer stopped watching, and tells whether it has
// resumed since the last: each end of a watch, failed start of one and failed
// list is a lapse, and a list that succeeds or a watch that starts is a
// resumption. A lapse says that something may have happened that the informer
// has not shown; a resumption that it shows what happens from then on.
type Lapses struct {
	mu      sync.Mutex
	lapses  uint64
	resumed bool
	// watches counts the watches started; only the latest one's end is a lapse.
	watches uint64
	// changed is closed, and replaced, at every lapse and resumption.
	changed chan struct{}
	// onLapse is told of each lapse while mu is held.
	onLapse func()
}

// NewLapses returns a record of no lapse yet.
func NewLapses() *Lapses {
	return &Lapses{resumed: true, changed: make(chan struct{})}
}

func (r *Lapses) lapsedLocked() {
	r.lapses++
	r.resumed = false
	if r.onLapse != nil {
		r.onLapse()
	}
	r.changedLocked()
}

func (r *Lapses) resumedLocked() {
	if !r.resumed {
		r.resumed = true
		r.changedLocked()
	}
}

func (r *Lapses) changedLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// Listed records the outcome of one list request of the informer: a failure, or
// the last page of a list.
func (r *Lapses) Listed(list runtime.Object, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err != nil:
		r.lapsedLocked()
	case LastPage(list):
		r.resumedLocked()
	}
}

// LastPage tells whether list is the last page of a list.
func LastPage(list runtime.Object) bool {
	l, err := meta.ListAccessor(list)
	return err == nil && l.GetContinue() == ""
}

// WatchStarted records the outcome of a watch request and returns the watch's
// number, for WatchEnded.
func (r *Lapses) WatchStarted(err error) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.lapsedLocked()
		return 0
	}
	r.watches++
	r.resumedLocked()
	return r.watches
}

// WatchEnded records that watch n ended; it is a lapse if no later watch started.
func (r *Lapses) WatchEnded(n uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n == r.watches {
		r.lapsedLocked()
	}
}

// State returns the lapses so far, whether the informer resumed since the last,
// and a channel closed at the next change.
func (r *Lapses) State() (lapses uint64, resumed bool, changed <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lapses, r.resumed, r.changed
}

// Follow makes onLapse be told of every lapse from now on, and at once if the
// informer lapsed more often than the proven lapses count.
func (r *Lapses) Follow(proven uint64, onLapse func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onLapse = onLapse
	if r.lapses != proven {
		onLapse()
	}
}

// IfNoLapseSince runs fn, unless the informer lapsed after the lapses counted,
// and reports whether it ran.
func (r *Lapses) IfNoLapseSince(lapses uint64, fn func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lapses != lapses {
		return false
	}
	fn()
	return true
}
