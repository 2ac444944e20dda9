package controller

import (
	"testing"
	"time"
)

// TestPodGaps: a failure opens a gap; a list ends it and moves the time waits for
// unmount count from, a watch that resumes ends it and moves nothing, and the end
// of a gap, and only that, is told on.
func TestPodGaps(t *testing.T) {
	start := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	tests := []struct {
		name         string
		steps        func(g *podGaps, now *time.Time)
		wantWatching bool
		wantSince    time.Time
		wantEnds     int
	}{
		{name: "no gap yet", steps: func(*podGaps, *time.Time) {}, wantWatching: true},
		{name: "the first list ends no gap", steps: func(g *podGaps, _ *time.Time) { g.relisted() }, wantWatching: true, wantSince: start},
		{name: "a failure opens a gap", steps: func(g *podGaps, _ *time.Time) { g.failed() }},
		{name: "a list ends it, and the wait counts from it", steps: func(g *podGaps, now *time.Time) {
			g.relisted()
			g.failed()
			*now = now.Add(time.Minute)
			g.relisted()
		}, wantWatching: true, wantSince: start.Add(time.Minute), wantEnds: 1},
		{name: "a resumed watch ends it and moves nothing", steps: func(g *podGaps, now *time.Time) {
			g.relisted()
			g.failed()
			*now = now.Add(time.Minute)
			g.resumed()
		}, wantWatching: true, wantSince: start, wantEnds: 1},
		{name: "a resumed watch with no gap ends none", steps: func(g *podGaps, _ *time.Time) { g.resumed() }, wantWatching: true},
		{name: "a second gap after the first ended", steps: func(g *podGaps, now *time.Time) {
			g.failed()
			g.relisted()
			*now = now.Add(time.Minute)
			g.failed()
		}, wantSince: start, wantEnds: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now := start
			g := newPodGaps(func() time.Time { return now })
			ends := 0
			g.follow(func() { ends++ })
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
