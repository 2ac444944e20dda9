package safetyrules

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

var now = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

const vol = "kubernetes.io/fc/wwn:0"

// snapshot is a cluster of node-a and node-b, both Ready, where kubelet on
// node-a has vol mounted and no pod needs it anywhere; change edits it.
func snapshot(change func(s *Snapshot)) *Snapshot {
	mounted := map[NodeVolume]bool{{Node: "node-a", Volume: vol}: true}
	s := &Snapshot{
		Now:           now,
		Settings:      Settings{MaxWait: 6 * time.Minute, Grace: time.Second},
		Nodes:         map[string]*NodeHealth{"node-a": {}, "node-b": {}},
		Needed:        map[NodeVolume]bool{},
		UnneededSince: map[NodeVolume]time.Time{},
		NeededSince:   map[NodeVolume]time.Time{},
		Mounted:       func(node, volume string) bool { return mounted[NodeVolume{Node: node, Volume: volume}] },
		MayMount:      map[NodeVolume]bool{},
		LastListed:    map[NodeVolume]time.Time{},
		LastRemoved:   map[NodeVolume]time.Time{},
		ForceReleased: map[NodeVolume]time.Time{},
	}
	if change != nil {
		change(s)
	}
	return s
}

var onA = NodeVolume{Node: "node-a", Volume: vol}

func strs(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.String())
	}
	return out
}

func TestSingleAttachIsJudgedByListedAccessModes(t *testing.T) {
	tests := []struct {
		modes []corev1.PersistentVolumeAccessMode
		want  bool
	}{
		{modes: nil, want: false},
		{modes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, want: true},
		{modes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}, want: true},
		{modes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadOnlyMany}, want: false},
		{modes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, want: false},
	}
	for _, tc := range tests {
		if got := SingleAttach(tc.modes); got != tc.want {
			t.Errorf("SingleAttach(%v) = %t, want %t", tc.modes, got, tc.want)
		}
	}
}

func TestRule1ASingleAttachVolumeNeverHasVolumeAttachmentsOnTwoNodes(t *testing.T) {
	rwo := Volume{Ref: "PV pv-0", Name: "csi^h0", SingleAttach: true}
	rwx := Volume{Ref: "PV pv-1", Name: "csi^h1"}
	tests := []struct {
		name        string
		attachments []Attachment
		want        []string
	}{
		{
			name: "single-attach volume on two nodes",
			attachments: []Attachment{
				{Name: "va-b", Node: "node-b", Volume: rwo}, {Name: "va-a2", Node: "node-a", Volume: rwo}, {Name: "va-a1", Node: "node-a", Volume: rwo},
			},
			want: []string{"INVARIANT single-attach: single-attach volume PV pv-0 has VolumeAttachments on nodes node-a, node-b: va-a1, va-a2, va-b (at resourceVersion 7)"},
		},
		{
			name:        "single-attach volume twice on one node",
			attachments: []Attachment{{Name: "va-a1", Node: "node-a", Volume: rwo}, {Name: "va-a2", Node: "node-a", Volume: rwo}},
		},
		{
			name:        "multi-attach volume on two nodes",
			attachments: []Attachment{{Name: "va-a", Node: "node-a", Volume: rwx}, {Name: "va-b", Node: "node-b", Volume: rwx}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := strs(SingleAttached(tc.attachments, "at resourceVersion 7")); !slices.Equal(got, tc.want) {
				t.Errorf("violations %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRule2AVolumeIsNeverDetachedFromANodeThatHasItMountedUnlessForceConditionsHold(t *testing.T) {
	const (
		attachmentDeleted = "INVARIANT mounted-detach: VolumeAttachment va-0 (volume " + vol + " on node node-a) was deleted while kubelet there has it mounted; node "
		readyUnneeded     = "Ready=true out-of-service=false, volume unneeded there for 10m0s (by controller)"
		notReady          = "Ready=false out-of-service=false"
	)
	unhealthy := func(s *Snapshot) { s.Nodes["node-a"].Unhealthy = true }
	unneededFor := func(d time.Duration) func(s *Snapshot) {
		return func(s *Snapshot) { s.UnneededSince[onA] = now.Add(-d) }
	}
	both := func(fs ...func(s *Snapshot)) func(s *Snapshot) {
		return func(s *Snapshot) {
			for _, f := range fs {
				f(s)
			}
		}
	}
	tests := []struct {
		name   string
		change func(s *Snapshot)
		// entry: a volumesAttached entry leaves, not a VolumeAttachment.
		entry bool
		want  string
	}{
		{name: "VolumeAttachment deleted from a Ready node", change: unneededFor(10 * time.Minute),
			want: attachmentDeleted + readyUnneeded},
		{name: "volumesAttached entry left a Ready node", change: unneededFor(10 * time.Minute), entry: true,
			want: "INVARIANT mounted-detach: volume " + vol + " left the volumesAttached of node node-a while kubelet there has it mounted; node " + readyUnneeded},
		{name: "not mounted", change: func(s *Snapshot) { s.Mounted = func(string, string) bool { return false } }},
		{name: "node never seen", change: func(s *Snapshot) { delete(s.Nodes, "node-a") },
			want: attachmentDeleted + "unknown (by controller)"},
		{name: "out of service", change: func(s *Snapshot) { s.Nodes["node-a"].OutOfService = true }},
		{name: "out-of-service taint removed within the grace", change: func(s *Snapshot) { s.Nodes["node-a"].TaintRemovedAt = now.Add(-time.Second) }},
		{name: "out-of-service taint removed before the grace", change: func(s *Snapshot) { s.Nodes["node-a"].TaintRemovedAt = now.Add(-2 * time.Second) },
			want: attachmentDeleted + "Ready=true out-of-service=false (by controller)"},
		{name: "shut down, shutdown taint honoured", change: both(unhealthy, func(s *Snapshot) {
			s.Settings.DetachOnShutdownTaint, s.Nodes["node-a"].Shutdown, s.Needed[onA] = true, true, true
		})},
		{name: "shut down, shutdown taint not honoured", change: both(unhealthy, func(s *Snapshot) { s.Nodes["node-a"].Shutdown, s.Needed[onA] = true, true }),
			want: attachmentDeleted + notReady + ", volume still needed by a pod there (by controller)"},
		{name: "shutdown ended within the grace", change: func(s *Snapshot) {
			s.Settings.DetachOnShutdownTaint, s.Nodes["node-a"].ShutdownEndedAt = true, now.Add(-time.Second)
		}},
		{name: "deleted, unneeded for the wait", change: both(unhealthy, unneededFor(6*time.Minute-time.Second), func(s *Snapshot) { s.Nodes["node-a"].Deleted = true })},
		{name: "not Ready, unneeded for less than the wait", change: both(unhealthy, unneededFor(5*time.Minute)),
			want: attachmentDeleted + notReady + ", volume unneeded there for 5m0s (by controller)"},
		{name: "not Ready, volume never forced", change: both(unhealthy, unneededFor(10*time.Minute), func(s *Snapshot) {
			s.Settings.NeverForce = func(v string) bool { return v == vol }
		}), want: attachmentDeleted + notReady + ", volume unneeded there for 10m0s (by controller)"},
		{name: "Ready again within the grace, unneeded for the wait before", change: both(unneededFor(10*time.Minute), func(s *Snapshot) { s.Nodes["node-a"].HealthyAt = now.Add(-time.Second) })},
		{name: "Ready again before the grace", change: both(unneededFor(10*time.Minute), func(s *Snapshot) { s.Nodes["node-a"].HealthyAt = now.Add(-2 * time.Second) }),
			want: attachmentDeleted + readyUnneeded},
		{name: "Ready again, then needed, both within the grace", change: both(unneededFor(10*time.Minute), func(s *Snapshot) {
			s.Nodes["node-a"].HealthyAt, s.Needed[onA], s.NeededSince[onA] = now.Add(-time.Second), true, now.Add(-time.Second/2)
		})},
		{name: "not Ready, needed again within the grace", change: both(unhealthy, unneededFor(10*time.Minute), func(s *Snapshot) {
			s.Nodes["node-a"].UnhealthyAt, s.Needed[onA], s.NeededSince[onA] = now.Add(-time.Minute), true, now.Add(-time.Second/2)
		})},
		{name: "not Ready, needed again before the grace", change: both(unhealthy, unneededFor(10*time.Minute), func(s *Snapshot) {
			s.Nodes["node-a"].UnhealthyAt, s.Needed[onA], s.NeededSince[onA] = now.Add(-time.Minute), true, now.Add(-2*time.Second)
		}), want: attachmentDeleted + notReady + ", volume still needed by a pod there (by controller)"},
		{name: "needed within the grace, node not Ready only since", change: both(unhealthy, unneededFor(10*time.Minute), func(s *Snapshot) {
			s.Nodes["node-a"].UnhealthyAt, s.Needed[onA], s.NeededSince[onA] = now.Add(-time.Second/4), true, now.Add(-time.Second/2)
		}), want: attachmentDeleted + notReady + ", volume still needed by a pod there (by controller)"},
		{name: "no pods seen, not Ready, no wait set", change: both(unhealthy, func(s *Snapshot) { s.Settings = Settings{}; s.Now = time.Time{} })},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Detach{Node: "node-a", Volume: vol, Attachment: "va-0", When: "by controller"}
			if tc.entry {
				d.Attachment = ""
			}
			v, broken := snapshot(tc.change).Detached(d)
			if got := v.String(); broken != (tc.want != "") || (broken && got != tc.want) {
				t.Errorf("violation %t %q, want %q", broken, got, tc.want)
			}
		})
	}
}

func TestRule3ASingleAttachVolumeIsNeverListedOnANodeWhileAnotherMayHaveItMounted(t *testing.T) {
	v := Volume{Ref: "PV pv-0", Name: vol, SingleAttach: true}
	const listedOnB = "INVARIANT single-attach: single-attach volume " + vol + " (PV pv-0) listed in the volumesAttached of node node-b while kubelet on node-a may have it mounted; node node-a "
	tests := []struct {
		name   string
		change func(s *Snapshot)
		want   []string
	}{
		{name: "mounted on the other node", want: []string{listedOnB + "Ready=true out-of-service=false (by controller)"}},
		{name: "mountable on the other node by its status", change: func(s *Snapshot) {
			s.Mounted = func(string, string) bool { return false }
			s.MayMount[onA] = true
		}, want: []string{listedOnB + "Ready=true out-of-service=false (by controller)"}},
		{name: "mounted on the listing node only", change: func(s *Snapshot) {
			s.Mounted = func(node, _ string) bool { return node == "node-b" }
		}},
		{name: "released by a write of the other node", change: func(s *Snapshot) {
			s.LastListed[onA], s.LastRemoved[onA] = now.Add(-time.Minute), now.Add(-time.Minute)
		}},
		{name: "force conditions hold on the other node", change: func(s *Snapshot) { s.Nodes["node-a"].OutOfService = true }},
		{name: "released by force at an earlier listing, the other node back and in need", change: func(s *Snapshot) {
			s.LastListed[onA], s.ForceReleased[onA], s.Needed[onA] = now.Add(-time.Minute), now.Add(-30*time.Second), true
		}},
		{name: "listed again on the other node since its release by force", change: func(s *Snapshot) {
			s.LastListed[onA], s.ForceReleased[onA] = now.Add(-10*time.Second), now.Add(-30*time.Second)
		}, want: []string{listedOnB + "Ready=true out-of-service=false (by controller)"}},
		{name: "the other node's record lost before the controller was ready", change: func(s *Snapshot) {
			s.LastListed[onA], s.ControllerReady = now.Add(-3*time.Minute), now.Add(-time.Minute)
			s.Nodes["node-a"].Deletions = []time.Time{now.Add(-2 * time.Minute)}
		}},
		{name: "the other node listed it again after its record was lost", change: func(s *Snapshot) {
			s.LastListed[onA], s.ControllerReady = now.Add(-30*time.Second), now.Add(-time.Minute)
			s.Nodes["node-a"].Deletions = []time.Time{now.Add(-2 * time.Minute)}
		}, want: []string{listedOnB + "Ready=true out-of-service=false (by controller)"}},
		{name: "the other node deleted after the controller was ready", change: func(s *Snapshot) {
			s.LastListed[onA], s.ControllerReady = now.Add(-3*time.Minute), now.Add(-3*time.Minute)
			s.Nodes["node-a"].Deletions = []time.Time{now.Add(-2 * time.Minute)}
			s.Nodes["node-a"].Deleted, s.Nodes["node-a"].Unhealthy, s.Needed[onA] = true, true, true
		}, want: []string{listedOnB + "deleted, volume still needed by a pod there (by controller)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := strs(snapshot(tc.change).ListingBegan(v, "node-b", "by controller")); !slices.Equal(got, tc.want) {
				t.Errorf("violations %q, want %q", got, tc.want)
			}
		})
	}
}

// TestReleasedByForce: a listing elsewhere releases the nodes whose kubelet may
// have the volume mounted only while rule 2's force conditions hold there.
func TestReleasedByForce(t *testing.T) {
	v := Volume{Ref: "PV pv-0", Name: vol, SingleAttach: true}
	tests := []struct {
		name   string
		change func(s *Snapshot)
		want   []string
	}{
		{name: "the other node healthy"},
		{name: "the other node out of service", change: func(s *Snapshot) { s.Nodes["node-a"].OutOfService = true }, want: []string{"node-a"}},
		{name: "the other node out of service, released by a write already", change: func(s *Snapshot) {
			s.Nodes["node-a"].OutOfService = true
			s.LastListed[onA], s.LastRemoved[onA] = now.Add(-time.Minute), now.Add(-time.Minute)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := snapshot(tc.change).ReleasedByForce(v, "node-b"); !slices.Equal(got, tc.want) {
				t.Errorf("ReleasedByForce = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRule3AKubeletNeverGainsTheChanceToMountASingleAttachVolumeListedOnAnotherNode(t *testing.T) {
	v := Volume{Ref: "PV pv-0", Name: vol, SingleAttach: true}
	tests := []struct {
		name    string
		change  func(s *Snapshot)
		listers []string
		want    []string
	}{
		{name: "listed on another node", listers: []string{"node-b", "node-a"},
			want: []string{"INVARIANT single-attach: kubelet on node-a may mount single-attach volume " + vol + " (PV pv-0) while node node-b lists it in volumesAttached too (since the write by kubelet)"}},
		{name: "listed on its own node only", listers: []string{"node-a"}},
		{name: "force conditions hold on its node", listers: []string{"node-b"}, change: func(s *Snapshot) { s.Nodes["node-a"].OutOfService = true }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := strs(snapshot(tc.change).MountChanceBegan(v, "node-a", tc.listers, "since the write by kubelet")); !slices.Equal(got, tc.want) {
				t.Errorf("violations %q, want %q", got, tc.want)
			}
		})
	}
}
