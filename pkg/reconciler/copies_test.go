package reconciler_test

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// copyOf records, in the actual state, a VolumeAttachment another tool made of
// the volume on the node under a name of its own.
func (h *harness) copyOf(vol cache.Volume, node string, attached bool) {
	name := "copy-" + vaName(vol, node)
	h.actual.Observe(cache.Observation{
		Volume: vol.Name, Node: node, VolumeAttachment: name, UID: types.UID("uid-" + name),
		Attached: attached, MultiAttach: vol.MultiAttach,
	})
}

// TestAnotherToolsCopyDoesNotStandForTheControllersAttachment: kubelet waits for
// the VolumeAttachment named for the volume's handle, driver and node, as
// kube-controller-manager creates it and checks it (csiAttacher.WaitForAttach
// and VolumesAreAttached in v1.37.1 look that name up, nothing else). A copy
// another tool made under another name holds the volume on the node, but a pod
// there cannot start on it: the controller still creates its own. Before, a copy
// reported attached counted as the attachment, and the pod waited for good
// (simulation seeds 1057, 2393, 22253 and others with copies).
func TestAnotherToolsCopyDoesNotStandForTheControllersAttachment(t *testing.T) {
	tests := []struct {
		name string
		vol  cache.Volume
		// own: the controller's own object exists (attached), ownDeleting: and is
		// being deleted.
		own, ownDeleting bool
		wantCalls        []call
		wantCreated      bool
	}{
		{name: "single-attach: a copy alone is attached: attach", vol: rwo, wantCalls: []call{attachOn("node-a")}, wantCreated: true},
		{name: "multi-attach: a copy alone is attached: attach", vol: rwx, wantCalls: []call{attachOn("node-a")}, wantCreated: true},
		{name: "the controller's own is attached too: nothing to do", vol: rwo, own: true},
		{name: "the controller's own is being deleted: wait for it to go first", vol: rwo, own: true, ownDeleting: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, false)
			h.node("node-a")
			h.pod("ns", "db-a", "node-a", tc.vol)
			h.copyOf(tc.vol, "node-a", true)
			if tc.own {
				h.attachment(tc.vol, "node-a", true)
				if tc.ownDeleting {
					h.actual.MarkDeleting(vaName(tc.vol, "node-a"), "")
				}
			}

			h.sync(tc.vol)
			if got := h.exec.started(); !slices.Equal(got, tc.wantCalls) {
				t.Errorf("operations started = %v, want %v", got, tc.wantCalls)
			}
			if tc.wantCreated {
				h.waitFor("the controller's own VolumeAttachment to be created", func() bool { return h.exists(tc.vol, "node-a") })
			}
		})
	}
}
