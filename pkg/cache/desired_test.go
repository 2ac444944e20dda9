package cache_test

import (
	"slices"
	"testing"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

var (
	volA = cache.Volume{Name: volumename.CSI("d", "a"), Driver: "d", Handle: "a", PVName: "pv-a", DisplayName: "pv-a"}
	volB = cache.Volume{Name: volumename.CSI("d", "b"), Driver: "d", Handle: "b", PVName: "pv-b", DisplayName: "pv-b"}
	pod1 = cache.PodRef{Namespace: "ns", Name: "pod-1", UID: "uid-1"}
	pod2 = cache.PodRef{Namespace: "ns", Name: "pod-2", UID: "uid-2"}
)

func names(vols ...cache.Volume) []volumename.UniqueName {
	out := []volumename.UniqueName{}
	for _, v := range vols {
		out = append(out, v.Name)
	}
	slices.Sort(out)
	return out
}

// desiredStep changes the desired state and returns the volumes it reports changed.
type desiredStep func(d *cache.DesiredState) []volumename.UniqueName

func setPod(pod cache.PodRef, node string, vols ...cache.Volume) desiredStep {
	return func(d *cache.DesiredState) []volumename.UniqueName { return d.SetPod(pod, node, vols) }
}

func deletePod(pod cache.PodRef) desiredStep {
	return func(d *cache.DesiredState) []volumename.UniqueName { return d.DeletePod(pod.Key()) }
}

// placement is one (volume, node) pair the desired state should hold, with its pods.
type placement struct {
	vol  cache.Volume
	node string
	pods []cache.PodRef
}

func TestDesiredStateChanges(t *testing.T) {
	multi := volA
	multi.MultiAttach = true
	tests := []struct {
		name        string
		setup       []desiredStep
		step        desiredStep
		wantChanged []volumename.UniqueName
		want        []placement
	}{
		{
			name:        "new pod reports all its volumes",
			step:        setPod(pod1, "node-1", volA, volB),
			wantChanged: names(volA, volB),
			want:        []placement{{volA, "node-1", []cache.PodRef{pod1}}, {volB, "node-1", []cache.PodRef{pod1}}},
		},
		{
			name:        "same pod again reports nothing",
			setup:       []desiredStep{setPod(pod1, "node-1", volA, volB)},
			step:        setPod(pod1, "node-1", volA, volB),
			wantChanged: names(),
			want:        []placement{{volA, "node-1", []cache.PodRef{pod1}}, {volB, "node-1", []cache.PodRef{pod1}}},
		},
		{
			name:        "pod drops one volume",
			setup:       []desiredStep{setPod(pod1, "node-1", volA, volB)},
			step:        setPod(pod1, "node-1", volA),
			wantChanged: names(volB),
			want:        []placement{{volA, "node-1", []cache.PodRef{pod1}}},
		},
		{
			name:        "pod swaps a volume",
			setup:       []desiredStep{setPod(pod1, "node-1", volA)},
			step:        setPod(pod1, "node-1", volB),
			wantChanged: names(volA, volB),
			want:        []placement{{volB, "node-1", []cache.PodRef{pod1}}},
		},
		{
			name:        "pod with no volumes left is forgotten",
			setup:       []desiredStep{setPod(pod1, "node-1", volA)},
			step:        setPod(pod1, "node-1"),
			wantChanged: names(volA),
		},
		{
			name:        "pod moves to another node",
			setup:       []desiredStep{setPod(pod1, "node-1", volA)},
			step:        setPod(pod1, "node-2", volA),
			wantChanged: names(volA),
			want:        []placement{{volA, "node-2", []cache.PodRef{pod1}}},
		},
		{
			name:        "pod recreated with a new uid",
			setup:       []desiredStep{setPod(pod1, "node-1", volA)},
			step:        setPod(cache.PodRef{Namespace: "ns", Name: "pod-1", UID: "uid-new"}, "node-1", volA),
			wantChanged: names(volA),
			want:        []placement{{volA, "node-1", []cache.PodRef{{Namespace: "ns", Name: "pod-1", UID: "uid-new"}}}},
		},
		{
			name:        "volume spec changes",
			setup:       []desiredStep{setPod(pod1, "node-1", volA)},
			step:        setPod(pod1, "node-1", multi),
			wantChanged: names(volA),
			want:        []placement{{multi, "node-1", []cache.PodRef{pod1}}},
		},
		{
			name:        "second pod shares the volume on the same node",
			setup:       []desiredStep{setPod(pod1, "node-1", volA)},
			step:        setPod(pod2, "node-1", volA),
			wantChanged: names(volA),
			want:        []placement{{volA, "node-1", []cache.PodRef{pod1, pod2}}},
		},
		{
			name:        "second pod uses the volume on another node",
			setup:       []desiredStep{setPod(pod1, "node-1", volA)},
			step:        setPod(pod2, "node-2", volA),
			wantChanged: names(volA),
			want:        []placement{{volA, "node-1", []cache.PodRef{pod1}}, {volA, "node-2", []cache.PodRef{pod2}}},
		},
		{
			name:        "one of two sharing pods deleted",
			setup:       []desiredStep{setPod(pod1, "node-1", volA), setPod(pod2, "node-1", volA)},
			step:        deletePod(pod1),
			wantChanged: names(volA),
			want:        []placement{{volA, "node-1", []cache.PodRef{pod2}}},
		},
		{
			name:        "last pod deleted",
			setup:       []desiredStep{setPod(pod1, "node-1", volA, volB)},
			step:        deletePod(pod1),
			wantChanged: names(volA, volB),
		},
		{
			name:        "pod that names one volume twice deleted",
			setup:       []desiredStep{setPod(pod1, "node-1", volA, volA)},
			step:        deletePod(pod1),
			wantChanged: names(volA),
		},
		{
			name:        "pod that names one volume twice deleted, another node still needs it",
			setup:       []desiredStep{setPod(pod2, "node-2", volA), setPod(pod1, "node-1", volA, volA)},
			step:        deletePod(pod1),
			wantChanged: names(volA),
			want:        []placement{{volA, "node-2", []cache.PodRef{pod2}}},
		},
		{
			name:        "unknown pod deleted",
			setup:       []desiredStep{setPod(pod1, "node-1", volA)},
			step:        deletePod(pod2),
			wantChanged: names(),
			want:        []placement{{volA, "node-1", []cache.PodRef{pod1}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := cache.NewDesiredState()
			for _, s := range tc.setup {
				s(d)
			}
			got := tc.step(d)
			if len(got) == 0 {
				got = names()
			}
			if !slices.Equal(got, tc.wantChanged) {
				t.Errorf("changed = %q, want %q", got, tc.wantChanged)
			}
			checkPlacements(t, d, tc.want)
		})
	}
}

func checkPlacements(t *testing.T, d *cache.DesiredState, want []placement) {
	t.Helper()
	wantVols := map[volumename.UniqueName]map[string][]cache.PodRef{}
	wantNodes := map[string][]volumename.UniqueName{}
	for _, p := range want {
		if wantVols[p.vol.Name] == nil {
			wantVols[p.vol.Name] = map[string][]cache.PodRef{}
		}
		wantVols[p.vol.Name][p.node] = p.pods
		wantNodes[p.node] = append(wantNodes[p.node], p.vol.Name)
		if !d.IsDesired(p.vol.Name, p.node) {
			t.Errorf("IsDesired(%s, %s) = false, want true", p.vol.Name, p.node)
		}
		got, ok := d.Volume(p.vol.Name)
		if !ok {
			t.Errorf("Volume(%s) missing", p.vol.Name)
			continue
		}
		if got.Spec != p.vol {
			t.Errorf("Volume(%s).Spec = %+v, want %+v", p.vol.Name, got.Spec, p.vol)
		}
		if !slices.Equal(got.Nodes[p.node], p.pods) {
			t.Errorf("Volume(%s).Nodes[%s] = %v, want %v", p.vol.Name, p.node, got.Nodes[p.node], p.pods)
		}
	}
	for _, name := range d.Volumes() {
		got, _ := d.Volume(name)
		if len(got.Nodes) != len(wantVols[name]) {
			t.Errorf("Volume(%s).Nodes = %v, want %v", name, got.Nodes, wantVols[name])
		}
	}
	if len(d.Volumes()) != len(wantVols) {
		t.Errorf("Volumes() = %q, want %d volumes", d.Volumes(), len(wantVols))
	}
	for _, node := range []string{"node-1", "node-2"} {
		wantOnNode := wantNodes[node]
		slices.Sort(wantOnNode)
		if got := d.VolumesOnNode(node); !slices.Equal(got, wantOnNode) {
			t.Errorf("VolumesOnNode(%s) = %q, want %q", node, got, wantOnNode)
		}
	}
}

func TestDesiredStatePodKeys(t *testing.T) {
	d := cache.NewDesiredState()
	d.SetPod(pod1, "node-1", []cache.Volume{volA})
	d.SetPod(pod2, "node-1", []cache.Volume{volB})
	d.SetPod(pod2, "node-1", nil)
	if got := d.PodKeys(); !slices.Equal(got, []string{"ns/pod-1"}) {
		t.Errorf("PodKeys() = %q, want [ns/pod-1]", got)
	}
}

func TestMultiAttachReported(t *testing.T) {
	tests := []struct {
		name  string
		steps func(d *cache.DesiredState) []bool
		want  []bool
	}{
		{
			name: "once per wait",
			steps: func(d *cache.DesiredState) []bool {
				return []bool{d.MarkMultiAttachReported(volA.Name, "node-1"), d.MarkMultiAttachReported(volA.Name, "node-1")}
			},
			want: []bool{true, false},
		},
		{
			name: "reset starts a new wait",
			steps: func(d *cache.DesiredState) []bool {
				first := d.MarkMultiAttachReported(volA.Name, "node-1")
				d.ResetMultiAttachReported(volA.Name, "node-1")
				return []bool{first, d.MarkMultiAttachReported(volA.Name, "node-1")}
			},
			want: []bool{true, true},
		},
		{
			name: "per node",
			steps: func(d *cache.DesiredState) []bool {
				d.SetPod(pod2, "node-2", []cache.Volume{volA})
				return []bool{d.MarkMultiAttachReported(volA.Name, "node-1"), d.MarkMultiAttachReported(volA.Name, "node-2")}
			},
			want: []bool{true, true},
		},
		{
			name: "another pod joining the wait does not report again",
			steps: func(d *cache.DesiredState) []bool {
				first := d.MarkMultiAttachReported(volA.Name, "node-1")
				d.SetPod(pod2, "node-1", []cache.Volume{volA})
				return []bool{first, d.MarkMultiAttachReported(volA.Name, "node-1")}
			},
			want: []bool{true, false},
		},
		{
			name: "volume gone from the node and back starts a new wait",
			steps: func(d *cache.DesiredState) []bool {
				first := d.MarkMultiAttachReported(volA.Name, "node-1")
				d.DeletePod(pod1.Key())
				d.SetPod(pod1, "node-1", []cache.Volume{volA})
				return []bool{first, d.MarkMultiAttachReported(volA.Name, "node-1")}
			},
			want: []bool{true, true},
		},
		{
			name: "not desired on the node",
			steps: func(d *cache.DesiredState) []bool {
				return []bool{d.MarkMultiAttachReported(volA.Name, "node-2"), d.MarkMultiAttachReported(volB.Name, "node-1")}
			},
			want: []bool{false, false},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := cache.NewDesiredState()
			d.SetPod(pod1, "node-1", []cache.Volume{volA})
			if got := tc.steps(d); !slices.Equal(got, tc.want) {
				t.Errorf("MarkMultiAttachReported results = %v, want %v", got, tc.want)
			}
		})
	}
}

// PodEnded records the volumes of a pod the desired state may never have held
// as needed on its node until now, unless a pod held there still needs them.
func TestPodEnded(t *testing.T) {
	tests := []struct {
		name  string
		setup []desiredStep
		want  []volumename.UniqueName
	}{
		{name: "no pod held", want: names(volA, volB)},
		{name: "another pod on the node needs one", setup: []desiredStep{setPod(pod2, "node-1", volA)}, want: names(volB)},
		{name: "a pod on another node needs one", setup: []desiredStep{setPod(pod2, "node-2", volA)}, want: names(volA, volB)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := cache.NewDesiredState()
			for _, step := range tc.setup {
				step(d)
			}
			got := d.PodEnded("node-1", names(volA, volB))
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("PodEnded() = %q, want %q", got, tc.want)
			}
			for _, v := range []cache.Volume{volA, volB} {
				_, recorded := d.NeededUntil(v.Name)["node-1"]
				if want := slices.Contains(tc.want, v.Name); recorded != want {
					t.Errorf("NeededUntil(%s) has node-1: %t, want %t", v.Name, recorded, want)
				}
			}
		})
	}
}
