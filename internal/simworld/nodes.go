package simworld

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/attachdetach-controller/attachdetach-controller/internal/fakeapi"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
)

func (w *World) nodeNames() []string {
	return slices.Sorted(maps.Keys(w.nodes))
}

// createNode creates a node object, Ready. What the machine had mounted stays
// mounted: its kubelet, started once the object exists, registers the node with
// it in volumesInUse, and unmounts what no pod needs.
func (w *World) createNode(name string) *node {
	n, ok := w.nodes[name]
	if !ok {
		n = &node{name: name}
		w.nodes[name] = n
	}
	obj := sim.NewNode(name)
	for _, v := range w.mounts.OnNode(name) {
		obj.Status.VolumesInUse = append(obj.Status.VolumesInUse, corev1.UniqueVolumeName(v))
	}
	w.create(obj)
	n.exists, n.ready = true, true
	w.logf("node %s created, Ready", name)
	return n
}

// setKubelet starts or stops the kubelet of a node.
func (w *World) setKubelet(n *node, running bool) {
	if err := w.kubelet.SetRunning(n.name, running); err != nil {
		panic("simworld: " + err.Error())
	}
}

func readyCondition(ready bool) corev1.NodeCondition {
	now := metav1.Now()
	if ready {
		return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown", LastHeartbeatTime: now, LastTransitionTime: now}
}

// setReady stops or starts a node's kubelet; the node lifecycle controller
// reports it.
func (w *World) setReady(n *node, ready bool) {
	w.mutate("node-lifecycle", fakeapi.Ref{Resource: fakeapi.Nodes, Name: n.name}, func(obj runtime.Object) bool {
		node := obj.(*corev1.Node)
		node.Status.Conditions = []corev1.NodeCondition{readyCondition(ready)}
		if ready {
			node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == ShutdownTaint })
		}
		return true
	})
	w.logf("node %s Ready=%v (kubelet %s)", n.name, ready, map[bool]string{true: "started", false: "stopped"}[ready])
	n.ready = ready
	w.setKubelet(n, ready)
}

func (w *World) setTaint(n *node, tainted bool) {
	w.mutate("admin", fakeapi.Ref{Resource: fakeapi.Nodes, Name: n.name}, func(obj runtime.Object) bool {
		node := obj.(*corev1.Node)
		if OutOfService(node) == tainted {
			return false
		}
		if tainted {
			node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: OutOfServiceTaint, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
		} else {
			node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == OutOfServiceTaint })
		}
		w.logf("node %s out-of-service taint %v", n.name, map[bool]string{true: "added", false: "removed"}[tainted])
		return true
	})
}

func (w *World) deleteNode(n *node) {
	if err := w.store.Delete("admin", fakeapi.Ref{Resource: fakeapi.Nodes, Name: n.name}); err != nil {
		panic("simworld: deleting node " + n.name + ": " + err.Error())
	}
	n.exists, n.ready = false, false
	w.setKubelet(n, false)
	w.logf("node %s deleted (kubelet stopped)", n.name)
}
