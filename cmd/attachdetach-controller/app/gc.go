package app

import (
	"os"
	"runtime/debug"
	"sync"
)

// The Go collector's targets (GOGC) for the controller's process. Once it has
// caught up, its live heap is small next to the garbage that decoding watch
// events leaves, and a low target keeps the peak memory of an attach burst
// small for a little CPU. While it catches up (the informers' first lists, and
// the rebuild of its state at start-up and at each take-over) it allocates in a
// burst over a live heap as large as its caches, and each collection marks all
// of that heap: with the steady target, the rebuild of 50,000 volumes took about
// 1.5 times as long. GOMEMLIMIT still bounds the heap under either target.
const (
	steadyGCPercent     = 50
	catchingUpGCPercent = 100
)

// gcTargets switches the collector's target between catching up and steady.
// Catch-ups may overlap (a take-over while the informers still list); the
// target is steady again once the last one ends.
type gcTargets struct {
	steady, catchingUp int

	mu      sync.Mutex
	running int
}

// newGCTargets returns the controller's targets with the steady one in force, or
// nil, which changes nothing, when GOGC in the environment sets the target.
func newGCTargets() *gcTargets {
	if _, set := os.LookupEnv("GOGC"); set {
		return nil
	}
	debug.SetGCPercent(steadyGCPercent)
	return &gcTargets{steady: steadyGCPercent, catchingUp: catchingUpGCPercent}
}

// catchUp applies the catching-up target until the returned function is called
// (more than once is fine).
func (g *gcTargets) catchUp() (caughtUp func()) {
	if g == nil {
		return func() {}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running == 0 {
		debug.SetGCPercent(g.catchingUp)
	}
	g.running++
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.running--
			if g.running == 0 {
				debug.SetGCPercent(g.steady)
			}
		})
	}
}
