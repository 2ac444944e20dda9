package operationexecutor

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// inUseNode is the node as the API server returns it, reporting testPV in use.
func inUseNode(ready, outOfService bool) *v1.Node {
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: testNode, Annotations: map[string]string{cache.ManagedAnnotation: "true"}},
		Status:     v1.NodeStatus{VolumesInUse: []v1.UniqueVolumeName{v1.UniqueVolumeName(testPV.Name)}},
	}
	status := v1.ConditionFalse
	if ready {
		status = v1.ConditionTrue
	}
	n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: status}}
	if outOfService {
		n.Spec.Taints = []v1.Taint{{Key: cache.OutOfServiceTaint, Value: "nodeshutdown", Effect: v1.TaintEffectNoExecute}}
	}
	return n
}

// TestDetachDecidesOnTheConfirmedNodeNotTheInformers: once node status no
// longer lists the volume, the node the API server returned decides: a volume it
// reports in use is detached only if the force rule the caller named still holds
// on that node. Guards against "force detach on a stale node": the informer's
// node carried the out-of-service taint, or was NotReady, and the API server's no
// longer does.
func TestDetachDecidesOnTheConfirmedNodeNotTheInformers(t *testing.T) {
	notInUse := inUseNode(true, false)
	notInUse.Status.VolumesInUse = nil
	noReadyCondition := inUseNode(false, false)
	noReadyCondition.Status.Conditions = nil
	shutdownTainted := func(ready bool) *v1.Node {
		n := inUseNode(ready, false)
		n.Spec.Taints = []v1.Taint{{Key: cache.ShutdownTaint, Effect: v1.TaintEffectNoSchedule}}
		return n
	}
	tests := []struct {
		name string
		node *v1.Node
		// deleted is the node's last state in the register once its deletion
		// was seen; an empty node stands for a deletion whose last report was
		// not seen.
		deleted *v1.Node
		// informer is the node as the register last showed it present, before
		// any deletion (none: notInUse).
		informer *v1.Node
		// neededOnNode: a read of the node's pods finds one that needs the volume.
		neededOnNode bool
		force        cache.ForceRule
		wantErr      error
		wantForce    string
	}{
		{name: "in use, not forced", node: inUseNode(true, false), force: cache.NotForced, wantErr: ErrInUse},
		{name: "in use on a NotReady node, not forced", node: inUseNode(false, true), force: cache.NotForced, wantErr: ErrInUse},
		{name: "in use, out-of-service, the node carries the taint", node: inUseNode(false, true), force: cache.ForcedOutOfService, wantForce: "out-of-service"},
		{name: "in use, out-of-service, the node carries the taint and is Ready", node: inUseNode(true, true), force: cache.ForcedOutOfService, wantForce: "out-of-service"},
		{name: "stale node: out-of-service, the taint is gone", node: inUseNode(false, false), force: cache.ForcedOutOfService, wantErr: ErrInUse},
		{name: "in use, timeout, the node is NotReady", node: inUseNode(false, false), force: cache.ForcedOnTimeout, wantForce: "timeout"},
		{name: "in use, timeout, the node has no Ready condition", node: noReadyCondition, force: cache.ForcedOnTimeout, wantForce: "timeout"},
		{name: "stale node: timeout, the node is Ready again", node: inUseNode(true, false), force: cache.ForcedOnTimeout, wantErr: ErrInUse},
		{name: "stale node: timeout, Ready again though tainted", node: inUseNode(true, true), force: cache.ForcedOnTimeout, wantErr: ErrInUse},
		{name: "in use, shutdown, the node carries the taint and is NotReady", node: shutdownTainted(false), force: cache.ForcedOnShutdown, wantForce: "shutdown"},
		{name: "stale node: shutdown, the node is Ready again", node: shutdownTainted(true), force: cache.ForcedOnShutdown, wantErr: ErrInUse},
		{name: "stale node: shutdown, the taint is gone", node: inUseNode(false, false), force: cache.ForcedOnShutdown, wantErr: ErrInUse},
		{name: "not in use, not forced", node: notInUse, force: cache.NotForced},
		{name: "not in use, forced: no force counted", node: notInUse, force: cache.ForcedOutOfService},
		{name: "node gone, its deletion not seen yet", node: nil, force: cache.NotForced, wantErr: ErrInUse},
		{name: "node gone, its last report listed the volume in use", node: nil, deleted: inUseNode(true, false), force: cache.NotForced, wantErr: ErrInUse},
		{name: "node gone, its last report did not list the volume", node: nil, deleted: notInUse, force: cache.NotForced},
		{name: "node gone, its last report was not seen", node: nil, deleted: &v1.Node{}, force: cache.NotForced, wantErr: ErrInUse},
		{name: "node gone, timeout", node: nil, force: cache.ForcedOnTimeout, wantForce: "timeout"},
		{name: "node gone, timeout, but a pod the informer has not shown needs the volume", node: nil, neededOnNode: true, force: cache.ForcedOnTimeout, wantErr: ErrWanted},
		{name: "node gone, out-of-service, its deletion not seen yet", node: nil, informer: inUseNode(false, true), force: cache.ForcedOutOfService, wantErr: ErrInUse},
		{name: "node gone, out-of-service, its final state carried the taint", node: nil, deleted: inUseNode(false, true), force: cache.ForcedOutOfService, wantForce: "out-of-service"},
		{name: "node gone, out-of-service, its final state no longer carried the taint", node: nil, deleted: inUseNode(false, false), force: cache.ForcedOutOfService, wantErr: ErrInUse},
		{name: "node gone, out-of-service, its final state not seen", node: nil, informer: inUseNode(false, true), deleted: &v1.Node{}, force: cache.ForcedOutOfService, wantErr: ErrInUse},
		{name: "node gone, shutdown, its final state tainted and NotReady", node: nil, deleted: shutdownTainted(false), force: cache.ForcedOnShutdown, wantForce: "shutdown"},
		{name: "node gone, shutdown, its final state tainted but Ready again", node: nil, deleted: shutdownTainted(true), force: cache.ForcedOnShutdown, wantErr: ErrInUse},
		{name: "node gone, shutdown, its final state not seen", node: nil, informer: shutdownTainted(false), deleted: &v1.Node{}, force: cache.ForcedOnShutdown, wantErr: ErrInUse},
		{name: "timeout, but a pod the informer has not shown needs the volume", node: inUseNode(false, false), neededOnNode: true, force: cache.ForcedOnTimeout, wantErr: ErrWanted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, on := newDetachHarness(t, time.Minute)
			h.informerSeesDeletes = true
			h.status.node = tc.node
			h.neededOnNode = tc.neededOnNode
			if tc.informer != nil {
				h.nodes.Set(cache.NodeFromObject(tc.informer))
			}
			switch {
			case tc.deleted == nil:
			case tc.deleted.Name == "":
				if tc.informer == nil {
					h.nodes.Set(cache.NodeFromObject(notInUse))
				}
				h.nodes.MarkDeleted(testNode, nil)
			default:
				h.nodes.MarkDeleted(testNode, tc.deleted)
			}
			err := h.exec.detach(t.Context(), on, tc.force)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("detach = %v, want %v", err, tc.wantErr)
			}
			for _, reason := range []string{"out-of-service", "timeout", "shutdown"} {
				want := 0.0
				if reason == tc.wantForce {
					want = 1
				}
				if got := testutil.ToFloat64(h.metrics.ForceDetaches.WithLabelValues(reason)); got != want {
					t.Errorf("force detaches %q = %v, want %v", reason, got, want)
				}
			}
			got, _ := h.actual.Get(testPV.Name, testNode)
			if tc.wantErr != nil {
				if h.deleteCount() != 0 {
					t.Error("deleted though the detach was called off")
				}
				if !got.Reported() || !slices.Equal(h.status.enqueuedNodes(), []string{testNode}) {
					t.Errorf("after the called-off detach %+v, enqueued %q; want reported again and %s enqueued", got, h.status.enqueuedNodes(), testNode)
				}
				return
			}
			if h.deleteCount() != 1 || !got.Deleting() || got.Reported() {
				t.Errorf("after the detach: %d deletes, %+v; want 1 delete, deleting, not reported", h.deleteCount(), got)
			}
		})
	}
}

// TestDetachNeverDeletesWhileTheConfirmedNodeListsTheVolume: the node the API
// server returned is the proof that kubelet can no longer see the volume
// attached. A confirmation answered by a write computed before the volume was
// taken out (a status updater that mixed up which write covers which caller)
// must not let the delete go ahead, whatever else that node says.
func TestDetachNeverDeletesWhileTheConfirmedNodeListsTheVolume(t *testing.T) {
	listed := v1.AttachedVolume{Name: v1.UniqueVolumeName(testPV.Name)}
	tests := []struct {
		name  string
		force cache.ForceRule
		node  func() *v1.Node
	}{
		{name: "not in use, not forced", force: cache.NotForced, node: func() *v1.Node {
			n := inUseNode(true, false)
			n.Status.VolumesInUse = nil
			return n
		}},
		{name: "in use on a node out of service, forced", force: cache.ForcedOutOfService, node: func() *v1.Node { return inUseNode(false, true) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, on := newDetachHarness(t, time.Minute)
			h.informerSeesDeletes = true
			n := tc.node()
			n.Status.VolumesAttached = []v1.AttachedVolume{listed}
			h.status.node = n
			if err := h.exec.detach(t.Context(), on, tc.force); err == nil {
				t.Fatal("detach = nil, want an error: the confirmed node still lists the volume")
			}
			if h.deleteCount() != 0 {
				t.Error("deleted the VolumeAttachment of a volume node status still lists")
			}
			if got, _ := h.actual.Get(testPV.Name, testNode); !got.Reported() {
				t.Errorf("attachment after the failed detach = %+v, want listed in node status again", got)
			}
		})
	}
}
