package cache_test

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

func observation(vol cache.Volume, node string, attached bool) cache.Observation {
	return cache.Observation{
		Volume:           vol.Name,
		Node:             node,
		VolumeAttachment: volumename.AttachmentName(vol.Handle, vol.Driver, node),
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
	o := observation(volA, "node-1", true)
	s.Observe(o)
	s.SetHiddenFromNodeStatus(volA.Name, "node-1", true)
	s.MarkDeleting(o.VolumeAttachment, o.UID)
	s.Observe(o)
	on, ok := s.Get(volA.Name, "node-1")
	if !ok {
		t.Fatal("attachment missing")
	}
	if !on.HiddenFromNodeStatus {
		t.Error("after a new observation the volume is no longer hidden")
	}
	if on.Reported() {
		t.Error("hidden attachment is reported")
	}
}

func TestObserveCopiesTheObject(t *testing.T) {
	s := cache.NewActualState()
	o := observation(volA, "node-1", false)
	o.AttachError = "boom"
	o.Deleting = true
	o.MultiAttach = true
	s.Observe(o)
	got, ok := s.Object(o.VolumeAttachment)
	want := cache.Attachment{
		Volume: volA.Name, Node: "node-1", VolumeAttachment: o.VolumeAttachment, UID: o.UID, Seen: true,
		AttachError: "boom", Deleting: true, MultiAttach: true,
	}
	if !ok || got != want {
		t.Errorf("Object() = %+v, %v, want %+v", got, ok, want)
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

func TestOnNode(t *testing.T) {
	attached := cache.Attachment{Attached: true, MultiAttach: true}
	deleting := cache.Attachment{Deleting: true, MultiAttach: true}
	single := cache.Attachment{}
	tests := []struct {
		name                                  string
		on                                    cache.OnNode
		reported, isAttached, deleting, multi bool
	}{
		{"attached", cache.OnNode{Objects: []cache.Attachment{attached}}, true, true, false, true},
		{"not attached", cache.OnNode{Objects: []cache.Attachment{single}}, false, false, false, false},
		{"attached but hidden", cache.OnNode{Objects: []cache.Attachment{attached}, HiddenFromNodeStatus: true}, false, true, false, true},
		{"attached and deleting", cache.OnNode{Objects: []cache.Attachment{{Attached: true, Deleting: true}}}, true, true, true, false},
		{"one of two deleting", cache.OnNode{Objects: []cache.Attachment{attached, deleting}}, true, true, false, true},
		{"both deleting", cache.OnNode{Objects: []cache.Attachment{deleting, deleting}}, false, false, true, true},
		{"one says single-attach", cache.OnNode{Objects: []cache.Attachment{attached, single}}, true, true, false, false},
		{"no objects", cache.OnNode{}, false, false, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.on.Reported(); got != tc.reported {
				t.Errorf("Reported() = %v, want %v", got, tc.reported)
			}
			if got := tc.on.Attached(); got != tc.isAttached {
				t.Errorf("Attached() = %v, want %v", got, tc.isAttached)
			}
			if got := tc.on.Deleting(); got != tc.deleting {
				t.Errorf("Deleting() = %v, want %v", got, tc.deleting)
			}
			if got := tc.on.MultiAttach(); got != tc.multi {
				t.Errorf("MultiAttach() = %v, want %v", got, tc.multi)
			}
		})
	}
}

// Two VolumeAttachments of different names for one volume and node (another tool
// made the second) each hold the volume: deleting one leaves the other holding it.
func TestEveryObjectHoldsTheVolume(t *testing.T) {
	s := cache.NewActualState()
	ours := observation(volA, "node-1", true)
	theirs := ours
	theirs.VolumeAttachment, theirs.UID = "made-by-another-tool", "uid-other"
	s.Observe(ours)
	s.Observe(theirs)
	if on, _ := s.Get(volA.Name, "node-1"); len(on.Objects) != 2 {
		t.Fatalf("objects on node-1 = %+v, want both", on.Objects)
	}
	s.Forget(theirs.VolumeAttachment, theirs.UID)
	if got, want := s.Holders(volA.Name, "", "node-2"), []string{"node-1"}; !slices.Equal(got, want) {
		t.Errorf("Holders() after the other object went = %q, want %q: the controller's object still exists", got, want)
	}
	if got, want := s.ReportedVolumes("node-1"), names(volA); !slices.Equal(got, want) {
		t.Errorf("ReportedVolumes(node-1) = %q, want %q", got, want)
	}
}

// A create the controller sent holds the volume before any answer comes.
func TestBeginCreateHoldsTheVolume(t *testing.T) {
	s := cache.NewActualState()
	name := volumename.AttachmentName(volA.Handle, volA.Driver, "node-1")
	if !s.BeginCreate(volA.Name, "node-1", name, false) {
		t.Fatal("BeginCreate() = false on an empty state")
	}
	if s.BeginCreate(volA.Name, "node-1", name, false) {
		t.Error("BeginCreate() twice = true, want false: the object is recorded")
	}
	if got, want := s.Holders(volA.Name, "", "node-2"), []string{"node-1"}; !slices.Equal(got, want) {
		t.Errorf("Holders() = %q, want %q", got, want)
	}
	if got := s.ReportedVolumes("node-1"); len(got) != 0 {
		t.Errorf("ReportedVolumes() = %q, want none before it is attached", got)
	}
	if _, ok := s.ObjectNames()[name]; ok {
		t.Error("ObjectNames() lists an object the informer never showed")
	}
	s.Created(name, "uid-1")
	if att, _ := s.Object(name); att.UID != "uid-1" || att.Seen {
		t.Errorf("after Created: %+v, want UID uid-1, not seen", att)
	}
}

// The informer can show the object created and deleted before the create's answer
// is handled: the answer must not bring it back.
func TestCreatedAfterTheInformerSawTheObjectGo(t *testing.T) {
	s := cache.NewActualState()
	o := observation(volA, "node-1", true)
	s.BeginCreate(volA.Name, "node-1", o.VolumeAttachment, false)
	s.Observe(o)
	s.Forget(o.VolumeAttachment, o.UID)
	s.Created(o.VolumeAttachment, o.UID)
	if got := s.Holders(volA.Name, "", "node-2"); len(got) != 0 {
		t.Errorf("Holders() = %q, want none: the object is gone", got)
	}
	if total, _ := s.Counts(); total != 0 {
		t.Errorf("Counts() total = %d, want 0", total)
	}
}

func TestForgetOnlyTheObjectWithThatUID(t *testing.T) {
	s := cache.NewActualState()
	o := observation(volA, "node-1", true)
	s.Observe(o)
	if _, ok := s.Forget(o.VolumeAttachment, "uid-of-an-older-object"); ok {
		t.Error("Forget() with another UID removed the current object")
	}
	if _, ok := s.Forget(o.VolumeAttachment, o.UID); !ok {
		t.Error("Forget() with the object's UID found nothing")
	}
}

func TestReportedVolumes(t *testing.T) {
	volC := cache.Volume{Name: volumename.CSI("d", "c"), Driver: "d", Handle: "c"}
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
	got, ok := s.Forget(o.VolumeAttachment, "")
	if !ok || got.Node != "node-1" || got.Volume != volA.Name {
		t.Errorf("Forget() = %+v, %v, want the node-1 attachment", got, ok)
	}
	if _, ok := s.Get(volA.Name, "node-1"); ok {
		t.Error("forgotten attachment still there")
	}
	if atts := s.Volume(volA.Name); len(atts) != 1 || atts[0].Node != "node-2" {
		t.Errorf("Volume() = %+v, want node-2 only", atts)
	}
	if _, ok := s.Forget(o.VolumeAttachment, ""); ok {
		t.Error("Forget() twice found the attachment again")
	}
	s.Forget(volumename.AttachmentName(volA.Handle, volA.Driver, "node-2"), "")
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
	for _, a := range s.Volume(volA.Name) {
		got = append(got, a.Node)
	}
	if want := []string{"node-a", "node-b", "node-c"}; !slices.Equal(got, want) {
		t.Errorf("Attachments() nodes = %q, want %q", got, want)
	}
}

func TestUnmountWait(t *testing.T) {
	s := cache.NewActualState()
	s.Observe(observation(volA, "node-1", true))
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := s.StartUnmountWait(volA.Name, "node-1", t0, time.Time{}); !got.Equal(t0) {
		t.Errorf("first StartUnmountWait = %v, want %v", got, t0)
	}
	if got := s.StartUnmountWait(volA.Name, "node-1", t0.Add(time.Minute), time.Time{}); !got.Equal(t0) {
		t.Errorf("second StartUnmountWait = %v, want the first moment %v", got, t0)
	}
	if on, _ := s.Get(volA.Name, "node-1"); !on.UnmountWaitStarted.Equal(t0) {
		t.Errorf("OnNode.UnmountWaitStarted = %v, want %v", on.UnmountWaitStarted, t0)
	}
	s.EndUnmountWait(volA.Name, "node-1")
	t1 := t0.Add(2 * time.Minute)
	if got := s.StartUnmountWait(volA.Name, "node-1", t1, time.Time{}); !got.Equal(t1) {
		t.Errorf("StartUnmountWait after End = %v, want a new wait from %v", got, t1)
	}
	if got := s.StartUnmountWait(volB.Name, "node-1", t1, time.Time{}); !got.Equal(t1) {
		t.Errorf("StartUnmountWait of a missing attachment = %v, want now", got)
	}
}

func TestUnresolvedAttachments(t *testing.T) {
	s := cache.NewActualState()
	s.ObserveUnresolved(cache.UnresolvedAttachment{VolumeAttachment: "va-1", PVName: "pv-a", Node: "node-1"})
	s.ObserveUnresolved(cache.UnresolvedAttachment{VolumeAttachment: "va-2", PVName: "pv-a", Node: "node-2"})
	s.ObserveUnresolved(cache.UnresolvedAttachment{VolumeAttachment: "va-3", PVName: "pv-b", Node: "node-3"})

	if got, want := s.Holders(volA.Name, "pv-a", "node-9"), []string{"node-1", "node-2"}; !slices.Equal(got, want) {
		t.Errorf("Holders(pv-a) = %q, want %q", got, want)
	}
	if got, want := s.Holders(volA.Name, "pv-a", "node-1"), []string{"node-2"}; !slices.Equal(got, want) {
		t.Errorf("Holders(pv-a, except node-1) = %q, want %q", got, want)
	}
	if got, want := s.UnresolvedForPV("pv-a"), []string{"va-1", "va-2"}; !slices.Equal(got, want) {
		t.Errorf("UnresolvedForPV(pv-a) = %q, want %q", got, want)
	}
	if total, attached := s.Counts(); total != 3 || attached != 0 {
		t.Errorf("Counts() = %d, %d, want 3, 0", total, attached)
	}
	if got, want := s.UnresolvedOnNode("node-2"), []string{"va-2"}; !slices.Equal(got, want) {
		t.Errorf("UnresolvedOnNode(node-2) = %q, want %q", got, want)
	}

	s.Observe(cache.Observation{Volume: volA.Name, Node: "node-1", VolumeAttachment: "va-1", Attached: true})
	if got, want := s.UnresolvedForPV("pv-a"), []string{"va-2"}; !slices.Equal(got, want) {
		t.Errorf("UnresolvedForPV(pv-a) after resolving va-1 = %q, want %q", got, want)
	}
	s.Forget("va-2", "")
	if got, want := s.Holders(volB.Name, "pv-a", ""), []string(nil); !slices.Equal(got, want) {
		t.Errorf("Holders(pv-a) after forgetting va-2 = %q, want none", got)
	}
	if total, attached := s.Counts(); total != 2 || attached != 1 {
		t.Errorf("Counts() = %d, %d, want 2, 1", total, attached)
	}

	s.ObserveUnresolved(cache.UnresolvedAttachment{VolumeAttachment: "va-1", PVName: "pv-a", Node: "node-1"})
	if _, ok := s.Get(volA.Name, "node-1"); ok {
		t.Error("resolved attachment kept after its object became unresolved")
	}
	if got, want := s.Holders(volB.Name, "pv-a", ""), []string{"node-1"}; !slices.Equal(got, want) {
		t.Errorf("Holders(pv-a) = %q, want %q", got, want)
	}
}

func TestObserveReplacementObjectStartsAfresh(t *testing.T) {
	s := cache.NewActualState()
	old := observation(volA, "node-1", true)
	s.Observe(old)
	s.MarkDeleting(old.VolumeAttachment, old.UID)

	replacement := old
	replacement.UID = "uid-replacement"
	s.Observe(replacement)
	att, _ := s.Object(old.VolumeAttachment)
	if att.Deleting || att.UID != replacement.UID || !att.Attached {
		t.Errorf("replacement attachment = %+v, want not deleting, the new UID, attached", att)
	}
}

func TestReportOnlyAttachment(t *testing.T) {
	s := cache.NewActualState()
	vol := volumename.ISCSI("10.0.0.1:3260", "iqn.2001-04.com.example:disk1", 0)
	if !s.AddReportOnly(vol, "node-a", false) {
		t.Error("AddReportOnly: node status does not change, want it to")
	}
	if s.AddReportOnly(vol, "node-a", false) {
		t.Error("second AddReportOnly: node status changes, want no change")
	}
	if got := s.ReportedVolumes("node-a"); !slices.Equal(got, []volumename.UniqueName{vol}) {
		t.Errorf("ReportedVolumes = %v, want %v", got, vol)
	}
	if got := s.Holders(vol, "", "node-b"); !slices.Equal(got, []string{"node-a"}) {
		t.Errorf("Holders = %v, want node-a", got)
	}
	on, ok := s.Get(vol, "node-a")
	if !ok || !on.Attached() || on.Deleting() || len(on.Objects) != 1 || !on.Objects[0].ReportOnly() {
		t.Errorf("Get = %+v, %v; want one attached report-only attachment", on, ok)
	}
	if names := s.ObjectNames(); len(names) != 0 {
		t.Errorf("ObjectNames = %v, want none: no VolumeAttachment exists", names)
	}
	if total, _ := s.Counts(); total != 0 {
		t.Errorf("Counts total = %d, want 0 VolumeAttachments", total)
	}
	s.ForgetReportOnly(vol, "node-a")
	if _, ok := s.Get(vol, "node-a"); ok || s.HasNode("node-a") || len(s.Volumes()) != 0 {
		t.Error("ForgetReportOnly left the volume recorded")
	}
}

func TestForgetReportOnlyOfAVolumeNotRecordedDoesNothing(t *testing.T) {
	s := cache.NewActualState()
	vol := volumename.ISCSI("10.0.0.1:3260", "iqn.2001-04.com.example:disk1", 0)
	s.ForgetReportOnly(vol, "node-a")
	if s.HasNode("node-a") || len(s.Volumes()) != 0 {
		t.Error("ForgetReportOnly of a volume never recorded left something recorded")
	}
}

// TestLosingOneOfTwoObjectsChangesNodeStatusOnlyIfTheVolumeLeavesIt: a volume
// with two VolumeAttachments on a node stays listed in node status while the one
// left is attached.
func TestLosingOneOfTwoObjectsChangesNodeStatusOnlyIfTheVolumeLeavesIt(t *testing.T) {
	tests := []struct {
		name          string
		otherAttached bool
		want          bool
	}{
		{"the other is attached", true, false},
		{"the other is not attached", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := cache.NewActualState()
			s.Observe(cache.Observation{Volume: volA.Name, Node: "node-1", VolumeAttachment: "va-1", UID: "uid-1", Attached: true})
			s.Observe(cache.Observation{Volume: volA.Name, Node: "node-1", VolumeAttachment: "va-2", UID: "uid-2", Attached: tc.otherAttached})
			if got := s.ObserveUnresolved(cache.UnresolvedAttachment{VolumeAttachment: "va-1", PVName: "pv-a", Node: "node-1"}); got != tc.want {
				t.Errorf("node status changes: %t, want %t", got, tc.want)
			}
		})
	}
}

// TestHasNodeCountsEverythingRecordedOnTheNode: a VolumeAttachment whose volume
// is not known yet keeps its node from being forgotten, as an identified one does.
func TestHasNodeCountsEverythingRecordedOnTheNode(t *testing.T) {
	s := cache.NewActualState()
	s.Observe(observation(volA, "node-1", true))
	s.ObserveUnresolved(cache.UnresolvedAttachment{VolumeAttachment: "va-2", PVName: "pv-b", Node: "node-2"})
	for node, want := range map[string]bool{"node-1": true, "node-2": true, "node-3": false} {
		if got := s.HasNode(node); got != want {
			t.Errorf("HasNode(%s) = %t, want %t", node, got, want)
		}
	}
}

func TestHasReportOnlyOnlyForANodeWithAnInTreeReport(t *testing.T) {
	s := cache.NewActualState()
	s.Observe(observation(volA, "node-1", true))
	s.AddReportOnly(volumename.ISCSI("10.0.0.1:3260", "iqn.2001-04.com.example:disk1", 0), "node-2", false)
	for node, want := range map[string]bool{"node-1": false, "node-2": true, "node-3": false} {
		if got := s.HasReportOnly(node); got != want {
			t.Errorf("HasReportOnly(%s) = %t, want %t", node, got, want)
		}
	}
}

// TestMarksOnAVolumeNotRecordedDoNothing: the controller's marks may come for a
// volume whose attachment went in the meantime; they record nothing and change no
// node status.
func TestMarksOnAVolumeNotRecordedDoNothing(t *testing.T) {
	now := time.Date(2026, 11, 25, 15, 0, 0, 0, time.UTC)
	s := cache.NewActualState()
	s.Observe(observation(volA, "node-1", true))
	if s.HideForDetach(volA.Name, "node-2", cache.NotForced) {
		t.Error("HideForDetach on node-2, which has nothing: node status changes, want no change")
	}
	if s.SetHiddenFromNodeStatus(volB.Name, "node-1", true) {
		t.Error("SetHiddenFromNodeStatus of a volume not on node-1: node status changes, want no change")
	}
	if _, hidden := s.DetachForce(volA.Name, "node-2"); hidden {
		t.Error("DetachForce on node-2, which has nothing: hidden, want not")
	}
	if got := s.StartUnmountWait(volA.Name, "node-2", now, time.Time{}); !got.Equal(now) {
		t.Errorf("StartUnmountWait on node-2, which has nothing = %s, want now", got)
	}
	s.EndUnmountWait(volA.Name, "node-2")
	if s.HasNode("node-2") || !slices.Equal(s.ReportedVolumes("node-1"), []volumename.UniqueName{volA.Name}) {
		t.Errorf("after marks on what is not recorded: node-2 recorded %t, node-1 reports %v; want nothing on node-2, %s on node-1", s.HasNode("node-2"), s.ReportedVolumes("node-1"), volA.Name)
	}
}

// TestDeleteMarksApplyOnlyToTheObjectDeleted: a delete accepted, or whose outcome
// is unknown, is recorded on the object of that UID, on any object of that name
// when the UID is not given, and on a create without an answer yet (its UID
// unknown); never on a newer object of the same name.
func TestDeleteMarksApplyOnlyToTheObjectDeleted(t *testing.T) {
	const name = "va-1"
	seen := func(s *cache.ActualState) {
		s.Observe(cache.Observation{Volume: volA.Name, Node: "node-1", VolumeAttachment: name, UID: "uid-1", Attached: true})
	}
	created := func(s *cache.ActualState) { s.BeginCreate(volA.Name, "node-1", name, false) }
	tests := []struct {
		name   string
		record func(s *cache.ActualState)
		uid    types.UID
		want   bool
	}{
		{"the object of that UID", seen, "uid-1", true},
		{"a newer object of that name", seen, "uid-0", false},
		{"any object of that name", seen, "", true},
		{"a create without an answer", created, "uid-1", true},
		{"nothing of that name", func(*cache.ActualState) {}, "uid-1", false},
	}
	marks := []struct {
		name string
		mark func(s *cache.ActualState, uid types.UID)
		got  func(a cache.Attachment) bool
	}{
		{"MarkDeleting", func(s *cache.ActualState, uid types.UID) { s.MarkDeleting(name, uid) }, func(a cache.Attachment) bool { return a.Deleting }},
		{"SetDeleteUnsettled", func(s *cache.ActualState, uid types.UID) { s.SetDeleteUnsettled(name, uid, true) }, func(a cache.Attachment) bool { return a.DeleteUnsettled }},
	}
	for _, m := range marks {
		for _, tc := range tests {
			t.Run(m.name+"/"+tc.name, func(t *testing.T) {
				s := cache.NewActualState()
				tc.record(s)
				m.mark(s, tc.uid)
				att, _ := s.Object(name)
				if got := m.got(att); got != tc.want {
					t.Errorf("marked: %t, want %t", got, tc.want)
				}
			})
		}
	}
}

// TestAnUnknownDeleteOutcomeLastsUntilTheObjectIsSeenGoingOrReplaced: what the
// informer shows may predate the controller's delete, so a delete with an unknown
// outcome stays unsettled when the same object, or the controller's own create
// of that name, is shown again not being deleted; it ends once the object is
// shown being deleted, or a newer object of that name is shown.
func TestAnUnknownDeleteOutcomeLastsUntilTheObjectIsSeenGoingOrReplaced(t *testing.T) {
	const name = "va-1"
	shown := func(uid types.UID, deleting bool) cache.Observation {
		return cache.Observation{Volume: volA.Name, Node: "node-1", VolumeAttachment: name, UID: uid, Attached: true, Deleting: deleting}
	}
	tests := []struct {
		name   string
		record func(s *cache.ActualState)
		shown  cache.Observation
		want   bool
	}{
		{"same object shown again", func(s *cache.ActualState) { s.Observe(shown("uid-1", false)) }, shown("uid-1", false), true},
		{"own create shown", func(s *cache.ActualState) { s.BeginCreate(volA.Name, "node-1", name, false) }, shown("uid-1", false), true},
		{"shown being deleted", func(s *cache.ActualState) { s.Observe(shown("uid-1", false)) }, shown("uid-1", true), false},
		{"newer object shown", func(s *cache.ActualState) { s.Observe(shown("uid-1", false)) }, shown("uid-2", false), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := cache.NewActualState()
			tc.record(s)
			s.SetDeleteUnsettled(name, "", true)
			s.Observe(tc.shown)
			if att, _ := s.Object(name); att.DeleteUnsettled != tc.want {
				t.Errorf("delete unsettled: %t, want %t", att.DeleteUnsettled, tc.want)
			}
		})
	}
	s := cache.NewActualState()
	s.Observe(shown("uid-1", false))
	if att, _ := s.Object(name); att.DeleteUnsettled {
		t.Error("an object shown with no delete of the controller's is unsettled")
	}
}

func TestObjectOfAnUnknownNameIsNotFound(t *testing.T) {
	s := cache.NewActualState()
	s.Observe(observation(volA, "node-1", true))
	if att, ok := s.Object("va-unknown"); ok || att != (cache.Attachment{}) {
		t.Errorf("Object(va-unknown) = %+v, %t; want nothing", att, ok)
	}
}

// TestUnsettledListsWhatOnlyTheAPIServerCanSettle: a create the informer has not
// shown, and a delete with an unknown outcome; not an object shown and settled.
func TestUnsettledListsWhatOnlyTheAPIServerCanSettle(t *testing.T) {
	s := cache.NewActualState()
	s.BeginCreate(volA.Name, "node-1", "va-created", false)
	s.Observe(cache.Observation{Volume: volA.Name, Node: "node-2", VolumeAttachment: "va-shown", UID: "uid-2", Attached: true})
	s.Observe(cache.Observation{Volume: volB.Name, Node: "node-2", VolumeAttachment: "va-deleted", UID: "uid-3", Attached: true})
	s.SetDeleteUnsettled("va-deleted", "uid-3", true)
	var got []string
	for _, a := range s.Unsettled() {
		got = append(got, a.VolumeAttachment)
	}
	if want := []string{"va-created", "va-deleted"}; !slices.Equal(got, want) {
		t.Errorf("Unsettled = %q, want %q", got, want)
	}
}

// TestHideForDetachRecordsTheForceRule: hiding a reported volume changes node
// status and records the force rule of the detach; hiding it again changes
// nothing.
func TestHideForDetachRecordsTheForceRule(t *testing.T) {
	s := cache.NewActualState()
	s.Observe(observation(volA, "node-1", true))
	if _, hidden := s.DetachForce(volA.Name, "node-1"); hidden {
		t.Error("DetachForce before any detach: hidden, want not")
	}
	if !s.HideForDetach(volA.Name, "node-1", cache.ForcedOnTimeout) {
		t.Error("HideForDetach of a reported volume: node status does not change, want it to")
	}
	if s.HideForDetach(volA.Name, "node-1", cache.ForcedOnTimeout) {
		t.Error("HideForDetach again: node status changes, want no change")
	}
	if rule, hidden := s.DetachForce(volA.Name, "node-1"); !hidden || rule != cache.ForcedOnTimeout {
		t.Errorf("DetachForce = %q, %t; want %q, true", rule, hidden, cache.ForcedOnTimeout)
	}
}

// TestAnOlderObjectsLateEventsLeaveTheCreateRecorded: a create of a name succeeds
// only once the older object of that name is gone, but an informer that lags may
// show that older object's last events after the create. They must not take the
// place of the create's record: forgetting the older object would then forget
// the create, and a single-attach volume would look free (soak seed 48060).
func TestAnOlderObjectsLateEventsLeaveTheCreateRecorded(t *testing.T) {
	older := observation(volA, "node-1", true)
	older.UID = "uid-older"
	olderDeleting := older
	olderDeleting.Deleting = true
	tests := []struct {
		name     string
		answered types.UID
		events   []cache.Observation
		wantUID  types.UID
		wantSeen bool
	}{
		{name: "the create's answer names another UID", answered: "uid-new", events: []cache.Observation{older}, wantUID: "uid-new"},
		{name: "the create's answer names another UID, the older one being deleted", answered: "uid-new", events: []cache.Observation{olderDeleting}, wantUID: "uid-new"},
		{name: "no answer, an object being deleted", events: []cache.Observation{olderDeleting}},
		{name: "no answer, an object not being deleted is taken for the create's", events: []cache.Observation{older}, wantSeen: true},
		{name: "the create's own object", answered: "uid-older", events: []cache.Observation{older}, wantSeen: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := cache.NewActualState()
			s.BeginCreate(volA.Name, "node-1", older.VolumeAttachment, false)
			if tc.answered != "" {
				s.Created(older.VolumeAttachment, tc.answered)
			}
			for _, o := range tc.events {
				s.Observe(o)
			}
			s.Forget(older.VolumeAttachment, older.UID)
			if tc.wantSeen {
				// The object the create made is gone: nothing holds the volume.
				if got := s.Holders(volA.Name, "", "node-2"); len(got) != 0 {
					t.Errorf("Holders() = %q after its own object went, want none", got)
				}
				return
			}
			att, ok := s.Object(older.VolumeAttachment)
			if !ok || att.UID != tc.wantUID || att.Seen != tc.wantSeen {
				t.Fatalf("Object() = %+v, %t; want the create's record, UID %q, seen %t", att, ok, tc.wantUID, tc.wantSeen)
			}
			if got, want := s.Holders(volA.Name, "", "node-2"), []string{"node-1"}; !slices.Equal(got, want) {
				t.Errorf("Holders() = %q, want %q: the create's object may exist", got, want)
			}
		})
	}
}
