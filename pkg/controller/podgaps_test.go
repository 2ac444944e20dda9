package controller

import (
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodGaps: a failed list or watch, or a watch that ended with an error, opens
// a gap; only the last page of a successful list ends it, and the time it ended
// is when waits for unmount may count from.
func TestPodGaps(t *testing.T) {
	at := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	lastPage := &v1.PodList{}
	morePages := &v1.PodList{ListMeta: metav1.ListMeta{Continue: "next"}}
	failed := errors.New("etcd leader changed")
	tests := []struct {
		name         string
		steps        func(g *podGaps)
		wantWatching bool
		wantSince    time.Time
	}{
		{name: "no gap yet", steps: func(*podGaps) {}, wantWatching: true},
		{name: "a list with no gap before ends none", steps: func(g *podGaps) { g.listed(lastPage, nil) }, wantWatching: true},
		{name: "a watch that failed", steps: func(g *podGaps) { g.failed() }},
		{name: "a failed list", steps: func(g *podGaps) { g.listed(nil, failed) }},
		{name: "a list's first page does not end the gap", steps: func(g *podGaps) { g.failed(); g.listed(morePages, nil) }},
		{name: "the last page ends it", steps: func(g *podGaps) { g.failed(); g.listed(lastPage, nil) }, wantWatching: true, wantSince: at},
		{name: "a second gap opens after the first ended", steps: func(g *podGaps) { g.failed(); g.listed(lastPage, nil); g.failed() }, wantSince: at},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newPodGaps(func() time.Time { return at })
			tc.steps(g)
			since, watching := g.WatchingSince()
			if watching != tc.wantWatching || !since.Equal(tc.wantSince) {
				t.Errorf("WatchingSince() = %v, %t; want %v, %t", since, watching, tc.wantSince, tc.wantWatching)
			}
		})
	}
}
