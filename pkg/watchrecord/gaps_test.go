package watchrecord

import (
	"testing"
	"time"
)

// TestGaps: a failure opens a gap; a list ends it and moves the time waits for
// unmount count from, a watch that resumes ends it and moves nothing, and the end
// of a gap, and only that, is told on.
func TestGaps(t *testing.T) {
	start := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	tests := []struct {
		name         string
		steps        func(g *Gaps, now *time.Time)
		wantWatching bool
		wantSince    time.Time
		wantEnds     int
	}{
		{name: "no gap yet", steps: func(*Gaps, *time.Time) {}, wantWatching: true},
		{name: "the first list ends no gap", steps: func(g *Gaps, _ *time.Time) { g.Relisted() }, wantWatching: true, wantSince: start},
		{name: "a failure opens a gap", steps: func(g *Gaps, _ *time.Time) { g.Failed() }},
		{name: "a list ends it, and the wait counts from it", steps: func(g *Gaps, now *time.Time) {
			g.Relisted()
			g.Failed()
			*now = now.Add(time.Minute)
			g.Relisted()
		}, wantWatching: true, wantSince: start.Add(time.Minute), wantEnds: 1},
		{name: "a resumed watch ends it and moves nothing", steps: func(g *Gaps, now *time.Time) {
			g.Relisted()
			g.Failed()
			*now = now.Add(time.Minute)
			g.Resumed()
		}, wantWatching: true, wantSince: start, wantEnds: 1},
		{name: "a resumed watch with no gap ends none", steps: func(g *Gaps, _ *time.Time) { g.Resumed() }, wantWatching: true},
		{name: "a second gap after the first ended", steps: func(g *Gaps, now *time.Time) {
			g.Failed()
			g.Relisted()
			*now = now.Add(time.Minute)
			g.Failed()
		}, wantSince: start, wantEnds: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now := start
			g := NewGaps(func() time.Time { return now })
			ends := 0
			g.Follow(func() { ends++ })
			tc.steps(g, &now)
			since, watching := g.WatchingSince()
			if watching != tc.wantWatching || !since.Equal(tc.wantSince) {
				t.Errorf("WatchingSince() = %v, %t; want %v, %t", since, watching, tc.wantSince, tc.wantWatching)
			}
			if ends != tc.wantEnds {
				t.Errorf("gap ends told: %d, want %d", ends, tc.wantEnds)
			}
		})
	}
}
