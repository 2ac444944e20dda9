package controller

import (
	"context"
	"slices"
	"testing"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// Deletions the event handlers never delivered (an informer that relisted while
// the controller was starting, for instance) are healed by the periodic pass: the
// RWO volume is no longer held by the VolumeAttachment that is gone, and the node
// that is gone no longer counts as Ready.
func TestPeriodicPassHealsMissedDeletions(t *testing.T) {
	ctx := context.Background()
	vol := volumename.CSI(testDriver, "h-1")
	va := volumeAttachment("h-1", "node-a", pvSource("pv-1"), true)
	gone := node("node-a", nil, nil)
	c := startedController(t, gone, csiPV("pv-1", "h-1", "ns", "data"), va)
	if err := c.rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.actual.Holders(vol, "pv-1", "node-b"); !slices.Equal(got, []string{"node-a"}) {
		t.Fatalf("Holders() = %q before, want [node-a]", got)
	}
	// The objects leave the informers' caches without a delete event.
	if err := c.informers.attachments.Informer().GetIndexer().Delete(va); err != nil {
		t.Fatal(err)
	}
	if err := c.informers.nodes.Informer().GetIndexer().Delete(gone); err != nil {
		t.Fatal(err)
	}
	c.resync(ctx)
	if got := c.actual.Holders(vol, "pv-1", "node-b"); len(got) != 0 {
		t.Errorf("Holders() = %q after the periodic pass, want none: the VolumeAttachment is gone", got)
	}
	if n := c.nodes.Get("node-a"); n.Exists() || n.Ready {
		t.Errorf("node-a = %+v after the periodic pass, want deleted and not Ready", n)
	}
	// Nothing is recorded on the deleted node any more: it is forgotten.
	if c.deletedNodes.Len() != 1 || !c.forgetNextDeletedNode() {
		t.Fatalf("node-a is not queued to be forgotten")
	}
	if names := c.nodes.Names(); slices.Contains(names, "node-a") {
		t.Errorf("node register still remembers node-a: %q", names)
	}
}

// A VolumeAttachment the handlers never delivered is recorded by the periodic pass.
func TestPeriodicPassRecordsMissedAdditions(t *testing.T) {
	ctx := context.Background()
	vol := volumename.CSI(testDriver, "h-1")
	c := startedController(t, csiPV("pv-1", "h-1", "ns", "data"))
	if err := c.rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.informers.attachments.Informer().GetIndexer().Add(volumeAttachment("h-1", "node-a", pvSource("pv-1"), true)); err != nil {
		t.Fatal(err)
	}
	c.resync(ctx)
	if got := c.actual.Holders(vol, "pv-1", "node-b"); !slices.Equal(got, []string{"node-a"}) {
		t.Errorf("Holders() = %q after the periodic pass, want [node-a]", got)
	}
}
