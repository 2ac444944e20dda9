package cache_test

import (
	"maps"
	"testing"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

func TestDesiredCounts(t *testing.T) {
	iscsi := cache.Volume{Name: volumename.ISCSI("10.0.0.1:3260", "iqn.2001-04.com.example:disk", 0), DisplayName: "iscsi"}
	pod3 := cache.PodRef{Namespace: "ns", Name: "pod-3", UID: "uid-3"}
	d := cache.NewDesiredState()
	d.SetPod(pod1, "node-1", []cache.Volume{volA, volB})
	d.SetPod(pod2, "node-1", []cache.Volume{volA})
	d.SetPod(pod3, "node-2", []cache.Volume{volA, iscsi})

	csi := volumename.PluginLabel(volA.Name)
	if got, want := d.AttachmentsByPlugin(), map[string]int{csi: 3, volumename.PluginISCSI: 1}; !maps.Equal(got, want) {
		t.Errorf("AttachmentsByPlugin() = %v, want %v", got, want)
	}
	got := d.PodVolumesByNode()
	want := map[string]map[string]int{"node-1": {csi: 3}, "node-2": {csi: 1, volumename.PluginISCSI: 1}}
	if len(got) != len(want) || !maps.Equal(got["node-1"], want["node-1"]) || !maps.Equal(got["node-2"], want["node-2"]) {
		t.Errorf("PodVolumesByNode() = %v, want %v", got, want)
	}
}

func TestWaitCounts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		marked []string
		reset  []string
		want   int
	}{
		{name: "none"},
		{name: "one node waits", marked: []string{"node-1"}, want: 1},
		{name: "two nodes wait", marked: []string{"node-1", "node-2"}, want: 2},
		{name: "a wait that ended", marked: []string{"node-1", "node-2"}, reset: []string{"node-2"}, want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := cache.NewDesiredState()
			d.SetPod(pod1, "node-1", []cache.Volume{volA})
			d.SetPod(pod2, "node-2", []cache.Volume{volA})
			for _, n := range tc.marked {
				d.MarkMultiAttachReported(volA.Name, n)
			}
			for _, n := range tc.reset {
				d.ResetMultiAttachReported(volA.Name, n)
			}
			w := d.WaitsForDetach(time.Now().Add(time.Hour))
			if w.Count != tc.want || (tc.want > 0) != (w.Oldest >= time.Hour) {
				t.Errorf("WaitsForDetach() = %+v, want %d waits, the oldest over an hour old", w, tc.want)
			}
		})
	}
}

func TestActualCounts(t *testing.T) {
	s := cache.NewActualState()
	s.Observe(observation(volA, "node-1", true))
	s.Observe(observation(volA, "node-2", false))
	s.Observe(observation(volB, "node-1", true))
	if got, want := s.AttachedByPlugin(), map[string]int{volumename.PluginLabel(volA.Name): 2}; !maps.Equal(got, want) {
		t.Errorf("AttachedByPlugin() = %v, want %v", got, want)
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	s.StartUnmountWait(volA.Name, "node-1", t0, time.Time{})
	s.StartUnmountWait(volB.Name, "node-1", t0.Add(time.Minute), time.Time{})
	if got, want := s.UnmountWaits(t0.Add(2*time.Minute)), (cache.Wait{Count: 2, Oldest: 2 * time.Minute}); got != want {
		t.Errorf("UnmountWaits() = %+v, want %+v", got, want)
	}
}

func TestObserveMigrated(t *testing.T) {
	s := cache.NewActualState()
	o := observation(volA, "node-1", true)
	o.Migrated = true
	s.Observe(o)
	if on, _ := s.Get(volA.Name, "node-1"); !on.Migrated() {
		t.Error("OnNode.Migrated() = false for an observed migrated volume")
	}
}
