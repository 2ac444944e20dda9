package app

import (
	"runtime/debug"
	"testing"
)

// TestGCTargetIsSteadyOnceEveryCatchUpEnded: overlapping catch-ups (the
// informers' first lists and a take-over's rebuild) keep the catching-up target
// until the last one ends, and ending one twice changes nothing.
func TestGCTargetIsSteadyOnceEveryCatchUpEnded(t *testing.T) {
	was := debug.SetGCPercent(-1)
	t.Cleanup(func() { debug.SetGCPercent(was) })
	current := func() int {
		p := debug.SetGCPercent(-1)
		debug.SetGCPercent(p)
		return p
	}
	g := &gcTargets{steady: 50, catchingUp: 100}
	debug.SetGCPercent(g.steady)

	listed := g.catchUp()
	rebuilt := g.catchUp()
	steps := []struct {
		step string
		do   func()
		want int
	}{
		{"two catch-ups", func() {}, 100},
		{"the lists done", listed, 100},
		{"the lists done again", listed, 100},
		{"the rebuild done", rebuilt, 50},
		{"the rebuild done again", rebuilt, 50},
	}
	for _, s := range steps {
		s.do()
		if got := current(); got != s.want {
			t.Fatalf("after %s: GOGC %d, want %d", s.step, got, s.want)
		}
	}
	var unset *gcTargets
	unset.catchUp()()
	if got := current(); got != 50 {
		t.Errorf("targets unset (GOGC in the environment) changed GOGC to %d", got)
	}
}
