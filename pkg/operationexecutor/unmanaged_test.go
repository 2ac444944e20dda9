package operationexecutor

import (
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// TestForcedDetachCalledOffOnANodeNoLongerManaged: the reconciler decided a
// forced detach while the node was managed; the node the API server returns
// no longer carries the attach/detach-controller annotation: kubelet attaches
// and detaches there itself, and the controller leaves the volume alone, as the
// reconciler does for such a node. Before, the status updater answered nil for
// an unmanaged node, the detach took that for a deleted node, and a forced
// detach went ahead without looking at volumesInUse or the node's pods.
func TestForcedDetachCalledOffOnANodeNoLongerManaged(t *testing.T) {
	for _, force := range []cache.ForceRule{cache.NotForced, cache.ForcedOutOfService, cache.ForcedOnTimeout, cache.ForcedOnShutdown} {
		t.Run(string(force), func(t *testing.T) {
			h, on := newDetachHarness(t, time.Minute)
			h.informerSeesDeletes = true
			node := inUseNode(false, true)
			node.Spec.Taints = append(node.Spec.Taints, v1.Taint{Key: cache.ShutdownTaint, Effect: v1.TaintEffectNoSchedule})
			delete(node.Annotations, cache.ManagedAnnotation)
			h.status.node = node
			err := h.exec.detach(t.Context(), on, force)
			if !errors.Is(err, ErrNotManaged) {
				t.Errorf("detach = %v, want ErrNotManaged", err)
			}
			if n := h.deleteCount(); n != 0 {
				t.Errorf("%d deletes on a node the controller does not manage, want none", n)
			}
		})
	}
}
