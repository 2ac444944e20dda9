package simworld

import (
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/attachdetach-controller/attachdetach-controller/internal/fakeapi"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
)

func (w *World) nodeNames() []string {
	return slices.Sorted(maps.Keys(w.nodes))
}

// startNode creates a node object, Ready, and starts its kubelet. What the
// machine had mounted stays mounted: its kubelet finds it, registers the node
// with it in volumesInUse, and unmounts what no pod needs.
func (w *World) startNode(name string) {
	n, ok := w.nodes[name]
	if !ok {
		n = &node{name: name}
		w.nodes[name] = n
	}
	var inUse []corev1.UniqueVolumeName
	for _, v := range w.mounts.onNode(name) {
		inUse = append(inUse, corev1.UniqueVolumeName(v))
	}
	w.create(&corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{sim.ControllerManagedAnnotation: "true"}},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{readyCondition(true)}, VolumesInUse: inUse},
	})
	n.exists = true
	w.logf("node %s created, Ready", name)
	w.startKubelet(n)
}

func readyCondition(ready bool) corev1.NodeCondition {
	now := metav1.Now()
	if ready {
		return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown", LastHeartbeatTime: now, LastTransitionTime: now}
}

func (w *World) startKubelet(n *node) {
	n.ready = true
	n.loop++
	loop := n.loop
	var sync func()
	sync = func() {
		if n.loop != loop || !n.ready || !n.exists {
			return
		}
		w.kubeletSync(n)
		w.After(w.jitter(500*time.Millisecond, 1500*time.Millisecond), sync)
	}
	w.After(w.jitter(0, time.Second), sync)
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
	if ready {
		w.startKubelet(n)
	} else {
		n.ready = false
	}
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
	w.logf("node %s deleted (kubelet stopped)", n.name)
}

// podOnNode is what kubelet reads of a pod on its node.
type podOnNode struct {
	ref      fakeapi.Ref
	counts   bool
	deleting bool
	running  bool
	stopAt   time.Time
	volumes  []string
}

// kubeletSync is one pass of a node's kubelet: stop the containers of deleted
// pods once their grace period is over, remove the pods whose containers stopped
// and whose volumes are unmounted, unmount what no pod needs, report in
// volumesInUse what is needed or mounted, and mount what node status lists as
// attached.
func (w *World) kubeletSync(n *node) {
	var pods []podOnNode
	wanted := map[string]Volume{}
	w.store.Read(func(r fakeapi.Reader) {
		for _, pod := range fakeapi.List[*corev1.Pod](r) {
			if pod.Spec.NodeName != n.name {
				continue
			}
			p := podOnNode{ref: fakeapi.Ref{Resource: fakeapi.Pods, Namespace: pod.Namespace, Name: pod.Name}, counts: Counts(pod), deleting: pod.DeletionTimestamp != nil, running: running(pod)}
			if p.deleting {
				p.stopAt = pod.DeletionTimestamp.Time
			}
			for _, v := range PodVolumes(r, pod) {
				p.volumes = append(p.volumes, v.Name)
				if p.counts {
					wanted[v.Name] = v
				}
			}
			pods = append(pods, p)
		}
	})
	now := time.Now()
	for _, p := range pods {
		switch {
		case p.deleting && p.running && !now.Before(p.stopAt):
			w.mutate("kubelet/"+n.name, p.ref, func(obj runtime.Object) bool {
				stopContainers(obj.(*corev1.Pod))
				return true
			})
			w.logf("kubelet %s: containers of deleted pod %s stopped", n.name, p.ref.Name)
		case p.deleting && !p.running && !slices.ContainsFunc(p.volumes, func(v string) bool { _, ok := wanted[v]; return w.mounts.Mounted(n.name, v) && !ok }):
			if err := w.store.Delete("kubelet/"+n.name, p.ref); err == nil {
				w.logf("kubelet %s: pod %s removed", n.name, p.ref.Name)
			}
		}
	}
	for _, v := range w.mounts.onNode(n.name) {
		if _, ok := wanted[v]; !ok {
			w.mounts.Set(n.name, v, false)
			w.logf("kubelet %s: unmounted %s", n.name, v)
		}
	}
	inUse := map[string]bool{}
	for v := range wanted {
		inUse[v] = true
	}
	for _, v := range w.mounts.onNode(n.name) {
		inUse[v] = true
	}
	w.mutate("kubelet/"+n.name, fakeapi.Ref{Resource: fakeapi.Nodes, Name: n.name}, func(obj runtime.Object) bool {
		node := obj.(*corev1.Node)
		list := make([]corev1.UniqueVolumeName, 0, len(inUse))
		for _, v := range slices.Sorted(maps.Keys(inUse)) {
			list = append(list, corev1.UniqueVolumeName(v))
		}
		if slices.Equal(node.Status.VolumesInUse, list) {
			return false
		}
		node.Status.VolumesInUse = list
		w.logf("kubelet %s: volumesInUse %v", n.name, list)
		return true
	})
	for _, name := range slices.Sorted(maps.Keys(wanted)) {
		if !w.mounts.Mounted(n.name, name) {
			w.mount(n.name, wanted[name])
		}
	}
}

// mount mounts a volume if, at this instant, the node reports it in use, node
// status lists it attached and, for a CSI volume, its VolumeAttachment says
// attached: what kubelet waits for. An in-tree iSCSI or Fibre Channel volume has
// no VolumeAttachment: kubelet attaches it itself once node status lists it.
func (w *World) mount(nodeName string, v Volume) {
	w.store.Read(func(r fakeapi.Reader) {
		node, ok := fakeapi.Get[*corev1.Node](r, "", nodeName)
		if !ok || !slices.Contains(node.Status.VolumesInUse, corev1.UniqueVolumeName(v.Name)) ||
			!slices.ContainsFunc(node.Status.VolumesAttached, func(av corev1.AttachedVolume) bool { return string(av.Name) == v.Name }) {
			return
		}
		if !v.ReportOnly() {
			va, ok := fakeapi.Get[*storagev1.VolumeAttachment](r, "", sim.AttachmentName(v.Driver, v.Handle, nodeName))
			if !ok || !va.Status.Attached {
				return
			}
		}
		w.mounts.Set(nodeName, v.Name, true)
		w.logf("kubelet %s: mounted %s", nodeName, v.Name)
	})
}

func stopContainers(pod *corev1.Pod) {
	for i := range pod.Status.ContainerStatuses {
		pod.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}
	}
}
