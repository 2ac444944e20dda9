package watchrecord

import (
	"errors"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestLapses: what counts as the VolumeAttachment informer stopping
// to watch, and as resuming.
func TestLapses(t *testing.T) {
	failed := errors.New("throttled")
	last := &storagev1.VolumeAttachmentList{}
	page := &storagev1.VolumeAttachmentList{ListMeta: metav1.ListMeta{Continue: "next"}}
	tests := []struct {
		name        string
		steps       func(r *Lapses)
		wantLapses  uint64
		wantResumed bool
	}{
		{"watching", func(r *Lapses) { r.WatchStarted(nil) }, 0, true},
		{"a watch that ended", func(r *Lapses) { r.WatchEnded(r.WatchStarted(nil)) }, 1, false},
		{"a watch that ended, then a list", func(r *Lapses) {
			r.WatchEnded(r.WatchStarted(nil))
			r.Listed(last, nil)
		}, 1, true},
		{"a failed list", func(r *Lapses) { r.Listed(nil, failed) }, 1, false},
		{"a failed list, then the first page of one", func(r *Lapses) {
			r.Listed(nil, failed)
			r.Listed(page, nil)
		}, 1, false},
		{"a failed list, then a whole one", func(r *Lapses) {
			r.Listed(nil, failed)
			r.Listed(page, nil)
			r.Listed(last, nil)
		}, 1, true},
		{"a watch that failed to start, then one that started", func(r *Lapses) {
			r.WatchStarted(failed)
			r.WatchStarted(nil)
		}, 1, true},
		{"the late end of a watch another replaced", func(r *Lapses) {
			first := r.WatchStarted(nil)
			r.WatchEnded(first)
			r.Listed(last, nil)
			r.WatchStarted(nil)
			r.WatchEnded(first)
		}, 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewLapses()
			told := uint64(0)
			r.Follow(0, func() { told++ })
			tc.steps(r)
			lapses, resumed, _ := r.State()
			if lapses != tc.wantLapses || resumed != tc.wantResumed || told != tc.wantLapses {
				t.Errorf("lapses %d (told %d), resumed %t; want %d, %t", lapses, told, resumed, tc.wantLapses, tc.wantResumed)
			}
		})
	}
}

// TestAProofEndsOnlyWithoutALapseSinceItBegan: a proof begun after some lapses
// does not mark the state complete once another lapse has come.
func TestAProofEndsOnlyWithoutALapseSinceItBegan(t *testing.T) {
	r := NewLapses()
	r.Listed(nil, errors.New("throttled"))
	lapses, _, _ := r.State()
	r.WatchEnded(r.WatchStarted(nil))
	if r.IfNoLapseSince(lapses, func() { t.Error("the proof ended after a lapse that came during it") }) {
		t.Error("ifNoLapseSince reported a proof that ended after a lapse during it")
	}
	now, _, _ := r.State()
	ran := false
	if !r.IfNoLapseSince(now, func() { ran = true }) || !ran {
		t.Error("a proof with no lapse since it began did not end")
	}
}
