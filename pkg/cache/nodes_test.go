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
