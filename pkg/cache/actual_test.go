package cache_test

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/csivolume"
)

func observation(vol cache.Volume, node string, attached bool) cache.Observation {
	return cache.Observation{
		Volume:           vol.Name,
		Node:             node,
		VolumeAttachment: csivolume.AttachmentName(vol.Handle, vol.Driver, node),
		UID:              types.UID("uid-" + node),
		Attached:         attached,
	}
}

func TestObserveReportsNodeStatusChanges(t *testing.T) {
	tests := []struct {
		name  string
		setup func(s *cache.ActualState)
		obs   cache.Observation
		want  bool
	}{
		{
			name: "new and not attached",
			obs:  observation(volA, "node-1", false),
			want: false,
		},
		{
			name: "new and attached",
			obs:  observation(volA, "node-1", true),
			want: true,
		},
		{
			name:  "becomes attached",
			setup: func(s *cache.ActualState) { s.Observe(observation(volA, "node-1", false)) },
			obs:   observation(volA, "node-1", true),
			want:  true,
		},
		{
			name:  "stays attached",
			setup: func(s *cache.ActualState) { s.Observe(observation(volA, "node-1", true)) },
			obs:   observation(volA, "node-1", true),
			want:  false,
		},
		{
			name:  "no longer attached",
			setup: func(s *cache.ActualState) { s.Observe(observation(volA, "node-1", true)) },
			obs:   observation(volA, "node-1", false),
			want:  true,
		},
		{
			name: "becomes attached while hidden",
			setup: func(s *cache.ActualState) {
				s.Observe(observation(volA, "node-1", false))
				s.SetHiddenFromNodeStatus(volA.Name, "node-1", true)
			},
			obs:  observation(volA, "node-1", true),
			want: false,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := cache.NewActualState()
			if tc.setup != nil {
				tc.setup(s)
			}
			if got := s.Observe(tc.obs); got != tc.want {
				t.Errorf("Observe() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestObserveKeepsControllerMarks(t *testing.T) {
	s := cache.NewActualState()
	s.Observe(observation(volA, "node-1", true))
	s.SetHiddenFromNodeStatus(volA.Name, "node-1", true)
	s.MarkDeleting(volA.Name, "node-1")
	s.Observe(observation(volA, "node-1", true))
	att, ok := s.Get(volA.Name, "node-1")
	if !ok {
		t.Fatal("attachment missing")
	}
	if !att.HiddenFromNodeStatus || !att.Deleting {
		t.Errorf("after a new observation hidden = %v deleting = %v, want both kept", att.HiddenFromNodeStatus, att.Deleting)
	}
	if att.Reported() {
		t.Error("hidden attachment is reported")
	}
}

func TestObserveCopiesTheObject(t *testing.T) {
	s := cache.NewActualState()
	o := observation(volA, "node-1", false)
	o.AttachError = "boom"
	o.Deleting = true
	s.Observe(o)
	got, ok := s.Get(volA.Name, "node-1")
	want := cache.Attachment{
		Volume: volA.Name, Node: "node-1", VolumeAttachment: o.VolumeAttachment, UID: o.UID,
		AttachError: "boom", Deleting: true,
	}
	if !ok || got != want {
		t.Errorf("Get() = %+v, %v, want %+v", got, ok, want)
	}
}

func TestObserveMovedObject(t *testing.T) {
	s := cache.NewActualState()
	o := observation(volA, "node-1", true)
	s.Observe(o)
	o.Node = "node-2"
	s.Observe(o)
	if _, ok := s.Get(volA.Name, "node-1"); ok {
		t.Error("attachment on node-1 kept after its object named node-2")
	}
	if got := s.VolumesOnNode("node-1"); len(got) != 0 {
		t.Errorf("VolumesOnNode(node-1) = %q, want none", got)
	}
	if _, ok := s.Get(volA.Name, "node-2"); !ok {
		t.Error("attachment on node-2 missing")
	}
}

func TestReported(t *testing.T) {
	tests := []struct {
		name string
		att  cache.Attachment
		want bool
	}{
		{"attached", cache.Attachment{Attached: true}, true},
		{"not attached", cache.Attachment{}, false},
		{"attached but hidden", cache.Attachment{Attached: true, HiddenFromNodeStatus: true}, false},
		{"attached and deleting", cache.Attachment{Attached: true, Deleting: true}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.att.Reported(); got != tc.want {
				t.Errorf("Reported() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReportedVolumes(t *testing.T) {
	volC := cache.Volume{Name: csivolume.NewUniqueName("d", "c"), Driver: "d", Handle: "c"}
	s := cache.NewActualState()
	s.Observe(observation(volB, "node-1", true))
	s.Observe(observation(volA, "node-1", true))
	s.Observe(observation(volC, "node-1", false))
	s.Observe(observation(volA, "node-2", true))
	if got, want := s.ReportedVolumes("node-1"), names(volA, volB); !slices.Equal(got, want) {
		t.Errorf("ReportedVolumes(node-1) = %q, want %q", got, want)
	}
	if !s.SetHiddenFromNodeStatus(volA.Name, "node-1", true) {
		t.Error("SetHiddenFromNodeStatus(true) reported no change")
	}
	if s.SetHiddenFromNodeStatus(volA.Name, "node-1", true) {
		t.Error("SetHiddenFromNodeStatus(true) twice reported a change")
	}
	if got, want := s.ReportedVolumes("node-1"), names(volB); !slices.Equal(got, want) {
		t.Errorf("ReportedVolumes(node-1) with A hidden = %q, want %q", got, want)
	}
	if got, want := s.ReportedVolumes("node-2"), names(volA); !slices.Equal(got, want) {
		t.Errorf("ReportedVolumes(node-2) = %q, want %q", got, want)
	}
	if !s.SetHiddenFromNodeStatus(volA.Name, "node-1", false) {
		t.Error("SetHiddenFromNodeStatus(false) reported no change")
	}
	if got, want := s.ReportedVolumes("node-1"), names(volA, volB); !slices.Equal(got, want) {
		t.Errorf("ReportedVolumes(node-1) after un-hiding = %q, want %q", got, want)
	}
	if s.SetHiddenFromNodeStatus(volC.Name, "node-2", true) {
		t.Error("SetHiddenFromNodeStatus on a missing attachment reported a change")
	}
}

func TestForget(t *testing.T) {
	s := cache.NewActualState()
	o := observation(volA, "node-1", true)
	s.Observe(o)
	s.Observe(observation(volA, "node-2", true))
	got, ok := s.Forget(o.VolumeAttachment)
	if !ok || got.Node != "node-1" || got.Volume != volA.Name {
		t.Errorf("Forget() = %+v, %v, want the node-1 attachment", got, ok)
	}
	if _, ok := s.Get(volA.Name, "node-1"); ok {
		t.Error("forgotten attachment still there")
	}
	if atts := s.Attachments(volA.Name); len(atts) != 1 || atts[0].Node != "node-2" {
		t.Errorf("Attachments() = %+v, want node-2 only", atts)
	}
	if _, ok := s.Forget(o.VolumeAttachment); ok {
		t.Error("Forget() twice found the attachment again")
	}
	s.Forget(csivolume.AttachmentName(volA.Handle, volA.Driver, "node-2"))
	if got := s.Volumes(); len(got) != 0 {
		t.Errorf("Volumes() = %q after forgetting everything, want none", got)
	}
}

func TestAttachmentsSortedByNode(t *testing.T) {
	s := cache.NewActualState()
	for _, n := range []string{"node-c", "node-a", "node-b"} {
		s.Observe(observation(volA, n, true))
	}
	var got []string
	for _, a := range s.Attachments(volA.Name) {
		got = append(got, a.Node)
	}
	if want := []string{"node-a", "node-b", "node-c"}; !slices.Equal(got, want) {
		t.Errorf("Attachments() nodes = %q, want %q", got, want)
	}
}

func TestDetachWanted(t *testing.T) {
	s := cache.NewActualState()
	s.Observe(observation(volA, "node-1", true))
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := s.DetachWantedSince(volA.Name, "node-1", t0); !got.Equal(t0) {
		t.Errorf("first DetachWantedSince = %v, want %v", got, t0)
	}
	if got := s.DetachWantedSince(volA.Name, "node-1", t0.Add(time.Minute)); !got.Equal(t0) {
		t.Errorf("second DetachWantedSince = %v, want the first moment %v", got, t0)
	}
	if att, _ := s.Get(volA.Name, "node-1"); !att.DetachWantedSince.Equal(t0) {
		t.Errorf("Attachment.DetachWantedSince = %v, want %v", att.DetachWantedSince, t0)
	}
	s.ClearDetachWanted(volA.Name, "node-1")
	t1 := t0.Add(2 * time.Minute)
	if got := s.DetachWantedSince(volA.Name, "node-1", t1); !got.Equal(t1) {
		t.Errorf("DetachWantedSince after Clear = %v, want a new wait from %v", got, t1)
	}
	if got := s.DetachWantedSince(volB.Name, "node-1", t1); !got.Equal(t1) {
		t.Errorf("DetachWantedSince of a missing attachment = %v, want now", got)
	}
}

func TestUnresolvedAttachments(t *testing.T) {
	s := cache.NewActualState()
	s.ObserveUnresolved(cache.UnresolvedAttachment{VolumeAttachment: "va-1", PVName: "pv-a", Node: "node-1"})
	s.ObserveUnresolved(cache.UnresolvedAttachment{VolumeAttachment: "va-2", PVName: "pv-a", Node: "node-2"})
	s.ObserveUnresolved(cache.UnresolvedAttachment{VolumeAttachment: "va-3", PVName: "pv-b", Node: "node-3"})

	if got, want := s.UnresolvedHolders("pv-a", "node-9"), []string{"node-1", "node-2"}; !slices.Equal(got, want) {
		t.Errorf("UnresolvedHolders(pv-a) = %q, want %q", got, want)
	}
	if got, want := s.UnresolvedHolders("pv-a", "node-1"), []string{"node-2"}; !slices.Equal(got, want) {
		t.Errorf("UnresolvedHolders(pv-a, except node-1) = %q, want %q", got, want)
	}
	if got, want := s.UnresolvedForPV("pv-a"), []string{"va-1", "va-2"}; !slices.Equal(got, want) {
		t.Errorf("UnresolvedForPV(pv-a) = %q, want %q", got, want)
	}
	if total, attached := s.Counts(); total != 3 || attached != 0 {
		t.Errorf("Counts() = %d, %d, want 3, 0", total, attached)
	}

	s.Observe(cache.Observation{Volume: volA.Name, Node: "node-1", VolumeAttachment: "va-1", Attached: true})
	if got, want := s.UnresolvedForPV("pv-a"), []string{"va-2"}; !slices.Equal(got, want) {
		t.Errorf("UnresolvedForPV(pv-a) after resolving va-1 = %q, want %q", got, want)
	}
	s.Forget("va-2")
	if got := s.UnresolvedHolders("pv-a", ""); len(got) != 0 {
		t.Errorf("UnresolvedHolders(pv-a) after forgetting va-2 = %q, want none", got)
	}
	if total, attached := s.Counts(); total != 2 || attached != 1 {
		t.Errorf("Counts() = %d, %d, want 2, 1", total, attached)
	}

	s.ObserveUnresolved(cache.UnresolvedAttachment{VolumeAttachment: "va-1", PVName: "pv-a", Node: "node-1"})
	if _, ok := s.Get(volA.Name, "node-1"); ok {
		t.Error("resolved attachment kept after its object became unresolved")
	}
	if got, want := s.UnresolvedHolders("pv-a", ""), []string{"node-1"}; !slices.Equal(got, want) {
		t.Errorf("UnresolvedHolders(pv-a) = %q, want %q", got, want)
	}
}

func TestObserveReplacementObjectStartsAfresh(t *testing.T) {
	s := cache.NewActualState()
	old := observation(volA, "node-1", true)
	s.Observe(old)
	s.SetHiddenFromNodeStatus(volA.Name, "node-1", true)
	s.MarkDeleting(volA.Name, "node-1")

	replacement := old
	replacement.UID = "uid-replacement"
	if !s.Observe(replacement) {
		t.Error("Observe() of an attached replacement = false, want a node status change")
	}
	att, _ := s.Get(volA.Name, "node-1")
	if att.Deleting || att.HiddenFromNodeStatus || !att.Reported() {
		t.Errorf("replacement attachment = %+v, want not deleting, not hidden, reported", att)
	}
}
