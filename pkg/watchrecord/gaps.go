package watchrecord

import (
	"sync"
	"time"
)

// The wait for unmount counts the time a volume has been needed by no pod on a
// node, as the pod informer shows the pods. The informer misses pods only when
// it lists again: a pod created and gone since its last event shows in neither
// its watch nor its new list. It lists again after a failed list, a failed
// watch, or a watch that ended with an error (410 Gone, an etcd error); when it
// watches again instead (after 429 or an internal error), it resumes from where
// it was and misses nothing. So:
//
//   - a gap opens at each failure, and no wait for unmount ends while one is open;
//   - a list (its last page, or a watch that sends the initial objects) ends the
//     gap, and a wait counts from no earlier than that list, since the pods it
//     missed may have needed the volume;
//   - a watch that resumes ends the gap and moves nothing.
//
// A watch that closes without an error (the API server's timeout every 5 to 10
// minutes) opens no gap: the informer watches again from where it was, and a
// failure of that watch opens one.

// Gaps records the gaps in what the pod informer shows.
type Gaps struct {
	mu     sync.Mutex
	open   bool
	listed time.Time
	now    func() time.Time
	// onEnd is told, with mu not held, when a gap ends: waits for unmount held
	// by it may be judged again.
	onEnd func()
}

// NewGaps returns a record of no gap yet; now tells the time.
func NewGaps(now func() time.Time) *Gaps { return &Gaps{now: now} }

// Failed records a failed list or watch, or a watch that ended with an error.
func (g *Gaps) Failed() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = true
}

// Relisted records a complete list: the pods shown from now on, less any that
// came and went before it.
func (g *Gaps) Relisted() {
	g.end(true)
}

// Resumed records a watch started from where the informer was.
func (g *Gaps) Resumed() {
	g.end(false)
}

func (g *Gaps) end(relisted bool) {
	g.mu.Lock()
	ended := g.open
	g.open = false
	if relisted {
		g.listed = g.now()
	}
	onEnd := g.onEnd
	g.mu.Unlock()
	if ended && onEnd != nil {
		onEnd()
	}
}

// Follow makes onEnd be told of the end of every gap from now on.
func (g *Gaps) Follow(onEnd func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.onEnd = onEnd
}

// WatchingSince returns when the informer last listed (zero: not yet), and
// false while a gap is open.
func (g *Gaps) WatchingSince() (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.listed, !g.open
}
