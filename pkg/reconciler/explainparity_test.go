package reconciler_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/reconciler"
)

// TestSyncStartsWhatExplainSays: Sync acts on the decisions Explain reads. The
// attaches and detaches it starts are exactly those the decisions name, and a
// wait (mounted, held elsewhere, unmanaged node) starts nothing.
func TestSyncStartsWhatExplainSays(t *testing.T) {
	tests := []struct {
		name  string
		vol   cache.Volume
		setup func(h *harness)
	}{
		{name: "attach to the node that needs it", vol: rwo, setup: func(h *harness) {
			h.node("node-b")
			h.pod("ns", "db-b", "node-b", rwo)
		}},
		{name: "single-attach: detach from the holder, the other node waits", vol: rwo, setup: func(h *harness) {
			h.node("node-a")
			h.node("node-b")
			h.pod("ns", "db-b", "node-b", rwo)
			h.attachment(rwo, "node-a", true)
		}},
		{name: "multi-attach: detach from one node, attach to another", vol: rwx, setup: func(h *harness) {
			h.node("node-a")
			h.node("node-b")
			h.pod("ns", "web-b", "node-b", rwx)
			h.attachment(rwx, "node-a", true)
		}},
		{name: "out-of-service and mounted nodes: force detach from one, wait on the other", vol: rwx, setup: func(h *harness) {
			h.node("node-a", mounting(rwx), notReady, outOfService)
			h.node("node-b", mounting(rwx))
			h.attachment(rwx, "node-a", true)
			h.attachment(rwx, "node-b", true)
		}},
		{name: "unmanaged nodes: nothing", vol: rwx, setup: func(h *harness) {
			h.node("node-a", unmanaged)
			h.node("node-b", unmanaged)
			h.pod("ns", "web-b", "node-b", rwx)
			h.attachment(rwx, "node-a", true)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, false)
			tc.setup(h)
			var want []call
			for _, d := range h.r.Explain(tc.vol.Name, true) {
				switch d.Action {
				case reconciler.ActionAttach:
					want = append(want, attachOn(d.Node))
				case reconciler.ActionDetach:
					want = append(want, forceDetachOn(d.Node, d.Force))
				}
			}
			h.sync(tc.vol)
			got := h.exec.started()
			byNode := func(a, b call) int { return strings.Compare(a.String(), b.String()) }
			slices.SortFunc(got, byNode)
			slices.SortFunc(want, byNode)
			if !slices.Equal(got, want) {
				t.Errorf("Sync started %v; the decisions Explain read name %v", got, want)
			}
		})
	}
}
