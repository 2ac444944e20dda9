package statusupdater_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	clienttesting "k8s.io/client-go/testing"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// TestAWriteForcedOnTimeoutReadsThePodsRightBefore: for an iSCSI volume, the
// status write that takes it out is the detach. A detach forced because the wait
// for unmount ran out read the node's pods when it began, but its write may go
// out much later: meanwhile a pod that needs the volume came, and kubelet mounted
// it without changing the node, which already reported it in use (found by the
// simulation: seed 777, the write went out 1.3 s after the mount). The write
// reads the pods again right before it goes out, and keeps the volume while one
// needs it. A volume that the node does not report in use needs no read: kubelet
// reports a volume in use before it mounts it, which fails the write's
// precondition.
func TestAWriteForcedOnTimeoutReadsThePodsRightBefore(t *testing.T) {
	tests := []struct {
		name      string
		node      *v1.Node
		needed    bool
		wantList  []v1.AttachedVolume
		readsPods bool
	}{
		{name: "a pod came for it", node: inUse(managedNode("7", csiEntry(iscsi)), iscsi), needed: true, wantList: []v1.AttachedVolume{csiEntry(iscsi)}, readsPods: true},
		{name: "no pod needs it", node: inUse(managedNode("7", csiEntry(iscsi)), iscsi), wantList: nil, readsPods: true},
		{name: "not in use", node: managedNode("7", csiEntry(iscsi)), needed: true, wantList: nil},
	}
	for _, tc := range tests {
		for _, via := range []string{"Sync", "Confirm"} {
			t.Run(tc.name+"/"+via, func(t *testing.T) {
				h := newHarness(t, tc.node, tc.node.DeepCopy())
				h.actual.AddReportOnly(iscsi, nodeName, false)
				h.actual.HideForDetach(iscsi, nodeName, cache.ForcedOnTimeout)
				if tc.needed {
					h.pods.need(iscsi)
				}
				var err error
				if via == "Sync" {
					err = h.updater.Sync(context.Background(), nodeName)
				} else {
					_, err = h.updater.Confirm(context.Background(), nodeName)
				}
				if err != nil {
					t.Fatal(err)
				}
				got := tc.node.Status.VolumesAttached
				for _, a := range h.client.Actions() {
					if p, ok := a.(clienttesting.PatchAction); ok {
						got = patchedList(t, p)
					}
				}
				if len(got) != len(tc.wantList) || (len(got) > 0 && !slices.Equal(got, tc.wantList)) {
					t.Errorf("node status lists %v, want %v", got, tc.wantList)
				}
				if read := h.pods.reads > 0; read != tc.readsPods {
					t.Errorf("the pods were read: %t, want %t", read, tc.readsPods)
				}
			})
		}
	}
}

// TestAWriteForcedOnTimeoutWaitsForThePods: a write that would take out a
// volume in use, forced on timeout, is not sent while the node's pods cannot be
// read.
func TestAWriteForcedOnTimeoutWaitsForThePods(t *testing.T) {
	node := inUse(managedNode("7", csiEntry(iscsi)), iscsi)
	h := newHarness(t, node, node.DeepCopy())
	h.actual.AddReportOnly(iscsi, nodeName, false)
	h.actual.HideForDetach(iscsi, nodeName, cache.ForcedOnTimeout)
	h.pods.err = errors.New("the API server is unavailable")
	if err := h.updater.Sync(context.Background(), nodeName); err == nil {
		t.Error("Sync = nil, want the error of the pod read")
	}
	if patches := h.patches(t); len(patches) != 0 {
		t.Errorf("sent %d patches, want none", len(patches))
	}
}
