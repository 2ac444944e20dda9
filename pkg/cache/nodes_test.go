package cache_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

func TestNodeFromObject(t *testing.T) {
	managed := map[string]string{cache.ManagedAnnotation: "true"}
	ready := []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}
	tests := []struct {
		name             string
		node             v1.Node
		wantManaged      bool
		wantReady        bool
		wantOutOfService bool
	}{
		{
			name:        "managed and ready",
			node:        v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: managed}, Status: v1.NodeStatus{Conditions: ready}},
			wantManaged: true, wantReady: true,
		},
		{
			name:      "no annotation",
			node:      v1.Node{Status: v1.NodeStatus{Conditions: ready}},
			wantReady: true,
		},
		{
			name: "annotation not true",
			node: v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{cache.ManagedAnnotation: "false"}}},
		},
		{
			name:        "ready condition false",
			node:        v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: managed}, Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionFalse}}}},
			wantManaged: true,
		},
		{
			name:        "ready condition unknown",
			node:        v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: managed}, Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionUnknown}}}},
			wantManaged: true,
		},
		{
			name:        "no ready condition",
			node:        v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: managed}, Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeMemoryPressure, Status: v1.ConditionTrue}}}},
			wantManaged: true,
		},
		{
			name: "out-of-service NoExecute",
			node: v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: managed},
				Spec: v1.NodeSpec{Taints: []v1.Taint{{Key: cache.OutOfServiceTaint, Value: "nodeshutdown", Effect: v1.TaintEffectNoExecute}}}},
			wantManaged: true, wantOutOfService: true,
		},
		{
			name: "out-of-service NoSchedule",
			node: v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: managed},
				Spec: v1.NodeSpec{Taints: []v1.Taint{{Key: cache.OutOfServiceTaint, Effect: v1.TaintEffectNoSchedule}}}},
			wantManaged: true, wantOutOfService: true,
		},
		{
			name: "other taint",
			node: v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: managed},
				Spec: v1.NodeSpec{Taints: []v1.Taint{{Key: "node.kubernetes.io/unreachable", Effect: v1.TaintEffectNoExecute}}}},
			wantManaged: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.node.Name = "node-1"
			n := cache.NodeFromObject(&tc.node)
			if n.Name != "node-1" || n.Presence != cache.NodePresent {
				t.Errorf("name %q presence %v, want node-1 present", n.Name, n.Presence)
			}
			if n.Managed != tc.wantManaged || n.Ready != tc.wantReady || n.OutOfService != tc.wantOutOfService {
				t.Errorf("managed %v ready %v out-of-service %v, want %v %v %v",
					n.Managed, n.Ready, n.OutOfService, tc.wantManaged, tc.wantReady, tc.wantOutOfService)
			}
		})
	}
}

func nodeWithVolumesInUse(name string, inUse ...v1.UniqueVolumeName) *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{cache.ManagedAnnotation: "true"}},
		Status: v1.NodeStatus{
			Conditions:   []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
			VolumesInUse: inUse,
		},
	}
}

func TestNodeMounted(t *testing.T) {
	nodes := cache.NewNodes()
	nodes.Set(cache.NodeFromObject(nodeWithVolumesInUse("live", v1.UniqueVolumeName(volA.Name))))
	nodes.Set(cache.NodeFromObject(nodeWithVolumesInUse("gone", v1.UniqueVolumeName(volA.Name))))
	nodes.MarkDeleted("gone", nodeWithVolumesInUse("gone", v1.UniqueVolumeName(volA.Name)))
	nodes.Set(cache.NodeFromObject(nodeWithVolumesInUse("gone-unseen", v1.UniqueVolumeName(volA.Name))))
	nodes.MarkDeleted("gone-unseen", nil)
	nodes.MarkDeleted("never-seen", nil)
	tests := []struct {
		node string
		vol  cache.Volume
		want bool
	}{
		{"live", volA, true},
		{"live", volB, false},
		{"gone", volA, true},
		{"gone", volB, false},
		{"gone-unseen", volA, true},
		{"gone-unseen", volB, true},
		{"never-seen", volA, true},
		{"unknown", volA, true},
		{"unknown", volB, true},
	}
	for _, tc := range tests {
		t.Run(tc.node+"/"+tc.vol.Handle, func(t *testing.T) {
			if got := nodes.Get(tc.node).Mounted(tc.vol.Name); got != tc.want {
				t.Errorf("Mounted() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNodesRegister(t *testing.T) {
	tests := []struct {
		name         string
		steps        func(n *cache.Nodes)
		wantPresence cache.NodePresence
		wantReady    bool
		wantManaged  bool
	}{
		{
			name:         "set",
			steps:        func(n *cache.Nodes) { n.Set(cache.NodeFromObject(nodeWithVolumesInUse("node-1"))) },
			wantPresence: cache.NodePresent, wantReady: true, wantManaged: true,
		},
		{
			name: "deleted keeps what it was, not ready",
			steps: func(n *cache.Nodes) {
				n.Set(cache.NodeFromObject(nodeWithVolumesInUse("node-1")))
				n.MarkDeleted("node-1", nil)
			},
			wantPresence: cache.NodeDeleted, wantManaged: true,
		},
		{
			name: "forgotten after deletion",
			steps: func(n *cache.Nodes) {
				n.Set(cache.NodeFromObject(nodeWithVolumesInUse("node-1")))
				n.MarkDeleted("node-1", nil)
				n.Forget("node-1")
			},
		},
		{
			name: "forget leaves an existing node",
			steps: func(n *cache.Nodes) {
				n.Set(cache.NodeFromObject(nodeWithVolumesInUse("node-1")))
				n.Forget("node-1")
			},
			wantPresence: cache.NodePresent, wantReady: true, wantManaged: true,
		},
		{
			name: "created again after deletion",
			steps: func(n *cache.Nodes) {
				n.Set(cache.NodeFromObject(nodeWithVolumesInUse("node-1")))
				n.MarkDeleted("node-1", nil)
				n.Set(cache.NodeFromObject(nodeWithVolumesInUse("node-1")))
			},
			wantPresence: cache.NodePresent, wantReady: true, wantManaged: true,
		},
		{
			name:  "never seen",
			steps: func(*cache.Nodes) {},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes := cache.NewNodes()
			tc.steps(nodes)
			n := nodes.Get("node-1")
			if n.Name != "node-1" {
				t.Errorf("Name = %q, want node-1", n.Name)
			}
			if n.Presence != tc.wantPresence || n.Ready != tc.wantReady || n.Managed != tc.wantManaged {
				t.Errorf("presence %v ready %v managed %v, want %v %v %v",
					n.Presence, n.Ready, n.Managed, tc.wantPresence, tc.wantReady, tc.wantManaged)
			}
		})
	}
}

func TestNodesSetReturnsPrevious(t *testing.T) {
	nodes := cache.NewNodes()
	if prev := nodes.Set(cache.NodeFromObject(nodeWithVolumesInUse("node-1"))); prev.Exists() {
		t.Errorf("first Set returned %+v, want the zero node", prev)
	}
	prev := nodes.Set(cache.NodeFromObject(nodeWithVolumesInUse("node-1", v1.UniqueVolumeName(volA.Name))))
	if !prev.Exists() || len(prev.InUse) != 0 {
		t.Errorf("second Set returned %+v, want the first state", prev)
	}
}

// TestNamesKubernetesWrites pins the names others write on nodes, as Kubernetes
// v1.37.1 spells them: kubelet's annotation (pkg/volume/util's
// ControllerManagedAttachAnnotation) and the cloud node lifecycle controller's
// taint (cloud-provider's TaintNodeShutdown), neither in a module this one
// depends on; the out-of-service taint is k8s.io/api's constant.
func TestNamesKubernetesWrites(t *testing.T) {
	for _, tc := range []struct{ name, got, want string }{
		{"managed annotation", cache.ManagedAnnotation, "volumes.kubernetes.io/controller-managed-attach-detach"},
		{"shutdown taint", cache.ShutdownTaint, "node.cloudprovider.kubernetes.io/shutdown"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

// TestDeletedNodeTaintsCountOnlyFromItsFinalState: a node's taints count after
// its deletion only if its final state, as the informer delivered the deletion,
// carried them; the shutdown taint only if the node was not Ready then. A
// deletion seen by relisting has no final state: the register's copy may show a
// taint removed before the node went, and before, a forced detach on that taint
// went ahead with the volume mounted (the simulation's seeds 2593 and 29480).
func TestDeletedNodeTaintsCountOnlyFromItsFinalState(t *testing.T) {
	tainted := func(ready bool, keys ...string) *v1.Node {
		n := nodeWithVolumesInUse("node-1")
		if !ready {
			n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionFalse}}
		}
		for _, k := range keys {
			n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: k, Effect: v1.TaintEffectNoExecute})
		}
		return n
	}
	tests := []struct {
		name string
		// last is the node as the register last showed it present; final the
		// object the deletion delivered (nil: not known).
		last, final                        *v1.Node
		wantOutOfService, wantShutdown     bool
		wantOutOfServiceHolds, wantShHolds bool
	}{
		{name: "final state tainted out of service", last: tainted(false), final: tainted(false, cache.OutOfServiceTaint),
			wantOutOfService: true, wantOutOfServiceHolds: true},
		{name: "taint removed before the deletion", last: tainted(false, cache.OutOfServiceTaint), final: tainted(false)},
		{name: "final state not known", last: tainted(false, cache.OutOfServiceTaint, cache.ShutdownTaint)},
		{name: "final state shut down and NotReady", last: tainted(false), final: tainted(false, cache.ShutdownTaint),
			wantShutdown: true, wantShHolds: true},
		{name: "final state shut down but Ready again", last: tainted(false, cache.ShutdownTaint), final: tainted(true, cache.ShutdownTaint)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes := cache.NewNodes()
			nodes.Set(cache.NodeFromObject(tc.last))
			nodes.MarkDeleted("node-1", tc.final)
			n := nodes.Get("node-1")
			if n.OutOfService != tc.wantOutOfService || n.Shutdown != tc.wantShutdown {
				t.Errorf("out-of-service %v shutdown %v, want %v %v", n.OutOfService, n.Shutdown, tc.wantOutOfService, tc.wantShutdown)
			}
			if got := cache.ForcedOutOfService.HoldsAfterDeletion(n); got != tc.wantOutOfServiceHolds {
				t.Errorf("out-of-service rule holds = %v, want %v", got, tc.wantOutOfServiceHolds)
			}
			if got := cache.ForcedOnShutdown.HoldsAfterDeletion(n); got != tc.wantShHolds {
				t.Errorf("shutdown rule holds = %v, want %v", got, tc.wantShHolds)
			}
			if !cache.ForcedOnTimeout.HoldsAfterDeletion(n) || cache.NotForced.HoldsAfterDeletion(n) {
				t.Error("a node gone is not Ready: the timeout rule holds, and nothing unforced")
			}
		})
	}
}

// TestForceRulesNeedTheDeletionSeen: while the register still shows a node the
// API server no longer has, its taints are those of a state that may be past.
func TestForceRulesNeedTheDeletionSeen(t *testing.T) {
	n := nodeWithVolumesInUse("node-1")
	n.Status.Conditions = nil
	n.Spec.Taints = []v1.Taint{{Key: cache.OutOfServiceTaint}, {Key: cache.ShutdownTaint}}
	nodes := cache.NewNodes()
	nodes.Set(cache.NodeFromObject(n))
	if last := nodes.Get("node-1"); cache.ForcedOutOfService.HoldsAfterDeletion(last) || cache.ForcedOnShutdown.HoldsAfterDeletion(last) {
		t.Error("a taint of a node whose deletion the register has not seen counts")
	}
}
