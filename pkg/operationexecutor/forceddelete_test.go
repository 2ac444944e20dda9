package operationexecutor

import (
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// TestForcedDetachReadsTheNodeBeforeEachDelete: a forced detach judges its rule
// on the node Confirm returned, then deletes the VolumeAttachments of the pair
// one after the other (another tool's copy besides the controller's own), and
// seconds can pass before each delete. Before, a taint removed, or a node Ready
// again, in that time did not stop the deletes: the simulation's seeds 9996,
// 18358, 23417 and 49186 deleted a VolumeAttachment several seconds after the
// out-of-service taint was gone, with the volume still mounted. Now each delete
// of a forced detach follows a read of the node that still lets it.
func TestForcedDetachReadsTheNodeBeforeEachDelete(t *testing.T) {
	const extra = "csi-extra"
	unmounted := inUseNode(false, false)
	unmounted.Status.VolumesInUse = nil
	tests := []struct {
		name          string
		force         cache.ForceRule
		before, after *v1.Node
		// changesAfter is how many deletes are sent before the API server's
		// node becomes after (-1: never).
		changesAfter int
		wantDeletes  int
		wantErr      error
	}{
		{name: "the rule holds throughout", force: cache.ForcedOutOfService, before: inUseNode(false, true), changesAfter: -1, wantDeletes: 2},
		{name: "the taint removed before the first delete", force: cache.ForcedOutOfService, before: inUseNode(false, true), after: inUseNode(false, false), changesAfter: 0, wantErr: ErrInUse},
		{name: "the taint removed between the deletes of the pair", force: cache.ForcedOutOfService, before: inUseNode(false, true), after: inUseNode(false, false), changesAfter: 1, wantDeletes: 1, wantErr: ErrInUse},
		{name: "the node Ready again between the deletes of the pair", force: cache.ForcedOnTimeout, before: inUseNode(false, false), after: inUseNode(true, false), changesAfter: 1, wantDeletes: 1, wantErr: ErrInUse},
		{name: "the node deleted, tainted, between the deletes: its deletion not seen", force: cache.ForcedOutOfService, before: inUseNode(false, true), changesAfter: 1, wantDeletes: 1, wantErr: ErrInUse},
		{name: "the volume unmounted between the deletes of the pair", force: cache.ForcedOutOfService, before: inUseNode(false, true), after: unmounted, changesAfter: 1, wantDeletes: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := newDetachHarness(t, time.Minute)
			h.addAttached(t, extra, testNode, "uid-extra", false)
			h.informerSeesDeletes = true
			h.status.node = tc.before
			h.client.PrependReactor("get", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
				if tc.changesAfter >= 0 && h.deleteCount() >= tc.changesAfter {
					h.status.mu.Lock()
					h.status.node = tc.after
					h.status.mu.Unlock()
				}
				return false, nil, nil
			})
			err := h.exec.detach(t.Context(), h.onNode(t, testNode), tc.force)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Errorf("detach = %v, want %v", err, tc.wantErr)
			}
			if got := h.deleteCount(); got != tc.wantDeletes {
				t.Errorf("%d deletes, want %d", got, tc.wantDeletes)
			}
		})
	}
}
