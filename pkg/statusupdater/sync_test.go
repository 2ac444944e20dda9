package statusupdater_test

import (
	"context"
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

// serverVersions makes the fake API server answer node status patches with the
// patched list at a new resourceVersion, counting up from first, as etcd does.
func (h *harness) serverVersions(t *testing.T, first int) {
	t.Helper()
	rv := first
	h.client.PrependReactor("patch", "nodes", func(a clienttesting.Action) (bool, runtime.Object, error) {
		rv++
		return true, managedNode(strconv.Itoa(rv), patchedList(t, a.(clienttesting.PatchAction))...), nil
	})
}

// The informer delivers the controller's own writes one by one, after the
// controller may have written again: a copy no newer than the last write holds
// nothing the controller has not overwritten, and writing the same list again
// for it is wasted API load. A copy newer than the last write is what the API
// server holds, and is written over if it differs.
func TestSyncIgnoresCopiesOlderThanTheLastWrite(t *testing.T) {
	tests := []struct {
		name        string
		informer    *v1.Node
		hideB       bool
		wantPatches int
	}{
		{name: "the base of both writes", informer: managedNode("10"), wantPatches: 0},
		{name: "the first write, older than the last", informer: managedNode("11", csiEntry(volA)), wantPatches: 0},
		{name: "the last write", informer: managedNode("12", csiEntry(volA), csiEntry(volB)), wantPatches: 0},
		{name: "a newer version someone else took B out of", informer: managedNode("13", csiEntry(volA)), wantPatches: 1},
		{name: "a resourceVersion that cannot be ordered", informer: managedNode("11x", csiEntry(volA)), wantPatches: 1},
		{name: "the first write, B detached since", informer: managedNode("11", csiEntry(volA)), hideB: true, wantPatches: 1},
		{name: "the last write, B detached since", informer: managedNode("12", csiEntry(volA), csiEntry(volB)), hideB: true, wantPatches: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			h := newHarness(t, managedNode("10"), managedNode("10"))
			h.serverVersions(t, 10)
			h.attach(volA, true)
			if err := h.updater.Sync(ctx, nodeName); err != nil {
				t.Fatal(err)
			}
			h.attach(volB, true)
			if err := h.updater.Sync(ctx, nodeName); err != nil {
				t.Fatal(err)
			}
			if n := len(h.patches(t)); n != 2 {
				t.Fatalf("%d patches for two attachments with the informer behind, want 2", n)
			}
			h.client.ClearActions()
			if err := h.nodes.Update(tc.informer); err != nil {
				t.Fatal(err)
			}
			if tc.hideB {
				h.actual.SetHiddenFromNodeStatus(volB, nodeName, true)
			}
			if err := h.updater.Sync(ctx, nodeName); err != nil {
				t.Fatal(err)
			}
			patches := h.patches(t)
			if len(patches) != tc.wantPatches {
				t.Fatalf("Sync with the informer at resourceVersion %s sent %d patches, want %d", tc.informer.ResourceVersion, len(patches), tc.wantPatches)
			}
			if tc.hideB && len(patches) == 1 {
				if got := patchedList(t, patches[0]); len(got) != 1 || got[0] != csiEntry(volA) {
					t.Errorf("patched volumesAttached = %v, want only %s", got, volA)
				}
			}
		})
	}
}

// Writing for a node that is gone must not leave a record of it behind: with
// nodes coming and going (autoscaling), such records would pile up.
func TestSyncForgetsNodesThatAreGone(t *testing.T) {
	h := newHarness(t, nil)
	h.attach(volA, true)
	if err := h.updater.Sync(context.Background(), nodeName); err != nil {
		t.Fatal(err)
	}
	if n := h.updater.RecordedNodes(); n != 0 {
		t.Errorf("RecordedNodes() = %d after writing for a node that does not exist, want 0", n)
	}
}
