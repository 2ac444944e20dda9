package simworld

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/attachdetach-controller/attachdetach-controller/internal/fakeapi"
	"github.com/attachdetach-controller/attachdetach-controller/internal/safetyrules"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
)

// workloadLoop makes one random change, then schedules the next while changes go on.
func (w *World) workloadLoop() {
	if !w.changes {
		return
	}
	if w.cfg.Copies > 0 && w.rng.Float64() < w.cfg.Copies {
		w.copyAttachment()
	}
	ops := []struct {
		weight int
		do     func() bool
	}{
		{30, w.createPod},
		{12, w.deletePod},
		{12, w.movePod},
		{4, w.completePod},
		{5, w.nodeNotReady},
		{6, w.nodeReady},
		{3, w.taintNode},
		{3, w.untaintNode},
		{3, w.shutdownNode},
		{2, w.removeNode},
		{3, w.recreateNode},
		{4, w.createLatePV},
	}
	total := 0
	for _, op := range ops {
		total += op.weight
	}
	for range 5 { // an op may find nothing to do; try another
		pick := w.rng.IntN(total)
		for _, op := range ops {
			if pick < op.weight {
				if op.do() {
					w.After(w.jitter(200*time.Millisecond, 6*time.Second), w.workloadLoop)
					return
				}
				break
			}
			pick -= op.weight
		}
	}
	w.After(w.jitter(200*time.Millisecond, 6*time.Second), w.workloadLoop)
}

// livePod is a pod the workload may still delete or move.
type livePod struct {
	namespace, name, node string
	volumes               []corev1.Volume
}

// podState reads the pods: those not deleted and not finished, and the claims
// they use.
func (w *World) podState() (live []livePod, used map[string]bool) {
	used = map[string]bool{}
	w.store.Read(func(r fakeapi.Reader) {
		for _, pod := range fakeapi.List[*corev1.Pod](r) {
			if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded {
				continue
			}
			p := livePod{namespace: pod.Namespace, name: pod.Name, node: pod.Spec.NodeName}
			for _, v := range pod.Spec.Volumes {
				p.volumes = append(p.volumes, *v.DeepCopy())
				if v.PersistentVolumeClaim != nil {
					used[pod.Namespace+"/"+v.PersistentVolumeClaim.ClaimName] = true
				}
			}
			live = append(live, p)
		}
	})
	return live, used
}

// schedulable returns the nodes a scheduler would put a pod on: existing, Ready,
// not tainted.
func (w *World) schedulable(except string) []string {
	var out []string
	for _, name := range w.nodeNames() {
		n := w.nodes[name]
		if n.exists && n.ready && name != except {
			if node, ok := getObject[*corev1.Node](w.store, "", name); ok && !OutOfService(node) {
				out = append(out, name)
			}
		}
	}
	return out
}

// createPod starts a pod on a schedulable node using one or two claims of a
// namespace, a single-attach claim only if no other live pod uses it, and at
// times an inline iSCSI volume, which any number of pods may use.
func (w *World) createPod() bool {
	_, used := w.podState()
	nodes := w.schedulable("")
	if len(nodes) == 0 {
		return false
	}
	ns := []string{"ns-a", "ns-b"}[w.rng.IntN(2)]
	var vols []corev1.Volume
	for _, i := range w.rng.Perm(len(w.volumes)) {
		v := w.volumes[i]
		if v.namespace != ns || (v.mode != corev1.ReadWriteMany && used[ns+"/"+v.claim]) {
			continue
		}
		vols = append(vols, corev1.Volume{
			Name:         fmt.Sprintf("data-%d", len(vols)),
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.claim}},
		})
		if len(vols) == 2 || w.rng.IntN(3) > 0 {
			break
		}
	}
	if len(vols) == 0 {
		return false
	}
	if w.rng.IntN(4) == 0 {
		vols = append(vols, corev1.Volume{
			Name:         "scratch",
			VolumeSource: corev1.VolumeSource{ISCSI: w.inline[w.rng.IntN(len(w.inline))].DeepCopy()},
		})
	}
	w.startPod(nodes, ns, vols)
	return true
}

// startPod starts a pod of the namespace with the volumes on one of the nodes.
func (w *World) startPod(nodes []string, namespace string, vols []corev1.Volume) {
	w.pods++
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("pod-%d", w.pods)},
		Spec:       corev1.PodSpec{NodeName: nodes[w.rng.IntN(len(nodes))], Containers: []corev1.Container{{Name: "app", Image: "app"}}, Volumes: vols},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
		}}},
	}
	w.create(pod)
	w.logf("pod %s/%s created on %s using %s", pod.Namespace, pod.Name, pod.Spec.NodeName, describeVolumes(vols))
}

// describeVolumes names a pod's volumes for the log: claims, and inline iSCSI
// volumes by unique name.
func describeVolumes(vols []corev1.Volume) []string {
	out := make([]string, 0, len(vols))
	for _, v := range vols {
		if v.ISCSI != nil {
			out = append(out, sim.ISCSIVolumeName(v.ISCSI.TargetPortal, v.ISCSI.IQN, v.ISCSI.Lun))
		} else {
			out = append(out, v.PersistentVolumeClaim.ClaimName)
		}
	}
	return out
}

// deletePod deletes a live pod gracefully: its containers stop within 5 s if its
// kubelet runs, and it counts until then.
func (w *World) deletePod() bool {
	live, _ := w.podState()
	if len(live) == 0 {
		return false
	}
	w.gracefulDelete(live[w.rng.IntN(len(live))])
	return true
}

func (w *World) gracefulDelete(p livePod) {
	grace := w.jitter(0, 5*time.Second)
	w.mutate("workload", fakeapi.Ref{Resource: fakeapi.Pods, Namespace: p.namespace, Name: p.name}, func(obj runtime.Object) bool {
		pod := obj.(*corev1.Pod)
		at := metav1.NewTime(time.Now().Add(grace))
		pod.DeletionTimestamp = &at
		return true
	})
	w.logf("pod %s/%s on %s deleted (grace %s)", p.namespace, p.name, p.node, grace.Round(time.Millisecond))
}

// movePod deletes a live pod and starts its replacement, with the same volumes,
// on another node at once: a single-attach volume must first leave the old node.
func (w *World) movePod() bool {
	live, _ := w.podState()
	if len(live) == 0 {
		return false
	}
	p := live[w.rng.IntN(len(live))]
	nodes := w.schedulable(p.node)
	if len(nodes) == 0 {
		return false
	}
	w.gracefulDelete(p)
	w.startPod(nodes, p.namespace, p.volumes)
	return true
}

// completePod finishes a pod on a node whose kubelet runs.
func (w *World) completePod() bool {
	live, _ := w.podState()
	for _, i := range w.rng.Perm(len(live)) {
		p := live[i]
		if n := w.nodes[p.node]; n == nil || !n.ready {
			continue
		}
		w.mutate("kubelet", fakeapi.Ref{Resource: fakeapi.Pods, Namespace: p.namespace, Name: p.name}, func(obj runtime.Object) bool {
			pod := obj.(*corev1.Pod)
			pod.Status = sim.StoppedStatus(pod.Status, time.Now())
			pod.Status.Phase = corev1.PodSucceeded
			return true
		})
		w.logf("pod %s/%s on %s succeeded", p.namespace, p.name, p.node)
		return true
	}
	return false
}

// onRandomNode does something to a random node for which ok holds; false if
// there is none.
func (w *World) onRandomNode(ok func(n *node) bool, do func(n *node)) bool {
	var candidates []*node
	for _, name := range w.nodeNames() {
		if n := w.nodes[name]; ok(n) {
			candidates = append(candidates, n)
		}
	}
	if len(candidates) == 0 {
		return false
	}
	do(candidates[w.rng.IntN(len(candidates))])
	return true
}

func (w *World) nodeNotReady() bool {
	return w.onRandomNode(func(n *node) bool { return n.exists && n.ready }, func(n *node) { w.setReady(n, false) })
}

func (w *World) nodeReady() bool {
	return w.onRandomNode(func(n *node) bool { return n.exists && !n.ready }, func(n *node) { w.setReady(n, true) })
}

// taintNode marks a NotReady node out of service, as an admin does once it is
// known to be shut down.
func (w *World) taintNode() bool {
	return w.onRandomNode(func(n *node) bool { return n.exists && !n.ready }, func(n *node) { w.setTaint(n, true) })
}

func (w *World) untaintNode() bool {
	return w.onRandomNode(func(n *node) bool {
		node, ok := getObject[*corev1.Node](w.store, "", n.name)
		return n.exists && ok && OutOfService(node)
	}, func(n *node) { w.setTaint(n, false) })
}

// shutdownNode puts the cloud provider's shutdown taint on a NotReady node; it
// goes when the node is Ready again.
func (w *World) shutdownNode() bool {
	return w.onRandomNode(func(n *node) bool {
		node, ok := getObject[*corev1.Node](w.store, "", n.name)
		return n.exists && !n.ready && ok && !ShutdownTainted(node)
	}, func(n *node) {
		w.mutate("cloud-node-lifecycle", fakeapi.Ref{Resource: fakeapi.Nodes, Name: n.name}, func(obj runtime.Object) bool {
			node := obj.(*corev1.Node)
			node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: ShutdownTaint, Effect: corev1.TaintEffectNoSchedule})
			return true
		})
		w.logf("node %s shutdown taint added", n.name)
	})
}

// copyAttachment copies an attached VolumeAttachment of the controller's whose
// volume a pod on its node needs, under another name: another tool's object for
// the same volume and node.
func (w *World) copyAttachment() {
	var candidates []*storagev1.VolumeAttachment
	w.store.Read(func(r fakeapi.Reader) {
		wanted := Wanted(r)
		for _, va := range fakeapi.List[*storagev1.VolumeAttachment](r) {
			if IsCopy(va) || va.DeletionTimestamp != nil || !va.Status.Attached || va.Spec.Source.PersistentVolumeName == nil {
				continue
			}
			v, ok := PVVolume(r, *va.Spec.Source.PersistentVolumeName)
			if _, needed := wanted[safetyrules.NodeVolume{Node: va.Spec.NodeName, Volume: v.Name}]; ok && needed {
				candidates = append(candidates, va)
			}
		}
	})
	if len(candidates) == 0 {
		return
	}
	va := candidates[w.rng.IntN(len(candidates))]
	cp := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: copyPrefix + va.Name}, Spec: *va.Spec.DeepCopy()}
	if _, err := w.store.Create("other-tool", cp); err == nil {
		w.logf("other tool: copied VolumeAttachment %s to %s", va.Name, cp.Name)
	}
}

const copyPrefix = "copy-"

// IsCopy tells whether a VolumeAttachment is another tool's copy.
func IsCopy(va *storagev1.VolumeAttachment) bool { return strings.HasPrefix(va.Name, copyPrefix) }

func (w *World) removeNode() bool {
	return w.onRandomNode(func(n *node) bool { return n.exists }, w.deleteNode)
}

func (w *World) recreateNode() bool {
	return w.onRandomNode(func(n *node) bool { return !n.exists }, func(n *node) { w.setKubelet(w.createNode(n.name), true) })
}

// createLatePV creates a PV whose claim was bound to it before it existed.
func (w *World) createLatePV() bool {
	for _, v := range w.volumes {
		if !v.pvCreated {
			w.createPV(v)
			w.logf("PV %s created after its claim was bound", v.pv)
			return true
		}
	}
	return false
}

// podGCLoop force-deletes the pods of nodes that no longer exist, and of NotReady
// nodes tainted out of service, as kube-controller-manager's pod GC does.
func (w *World) podGCLoop() {
	var doomed []fakeapi.Ref
	w.store.Read(func(r fakeapi.Reader) {
		for _, pod := range fakeapi.List[*corev1.Pod](r) {
			node, ok := fakeapi.Get[*corev1.Node](r, "", pod.Spec.NodeName)
			if !ok || (!sim.Ready(node) && OutOfService(node)) {
				doomed = append(doomed, fakeapi.Ref{Resource: fakeapi.Pods, Namespace: pod.Namespace, Name: pod.Name})
			}
		}
	})
	for _, ref := range doomed {
		if err := w.store.Delete("pod-gc", ref); err == nil {
			w.logf("pod GC: pod %s/%s force-deleted", ref.Namespace, ref.Name)
		}
	}
	w.After(w.jitter(2*time.Second, 8*time.Second), w.podGCLoop)
}
