package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

const (
	podsByNode  = "byNode"
	podsByClaim = "byClaim"
)

// KubeletOptions configures a Kubelet.
type KubeletOptions struct {
	// Nodes are the names of the nodes simulated.
	Nodes []string
	// CreateNodes creates the Node objects that do not exist yet. Existing nodes get
	// the controller-managed annotation added.
	CreateNodes bool
	// UnmountDelay is how long a volume stays mounted, and in volumesInUse, after the
	// last pod on the node that used it terminated.
	UnmountDelay time.Duration
	// ManagePods also plays kubelet's part for the pods on the nodes: a pod becomes
	// Running once all its volumes are mounted; a deleted pod gets its containers
	// stopped and, once its volumes are unmounted, its object deleted for good.
	ManagePods bool
	// GracefulStop keeps a deleted pod's containers running until its
	// deletionTimestamp, the end of its grace period, instead of stopping them at once.
	GracefulStop bool
	// Period, if set, syncs each node on a loop of its own, the next sync this long
	// after the last, instead of on every change of what it reads.
	Period func() time.Duration
	// Mounts is the mount table the kubelet keeps, shared with whoever checks it;
	// nil for one of its own.
	Mounts *Mounts
	// Workers is the number of nodes synced in parallel; 4 by default.
	Workers int
}

// Kubelet simulates kubelet's side of controller-managed attach/detach on a set of
// nodes: it keeps each node's Ready condition and status.volumesInUse the way kubelet
// does, patching node status only when something changed. It mounts a volume once
// node status lists it in use and attached and, for a CSI volume that needs
// attaching, its VolumeAttachment says attached; it unmounts a volume no pod needs
// UnmountDelay after the last one stopped, then takes it out of volumesInUse. A pod
// runs once its volumes are mounted, as with the real kubelet.
//
// Where it differs from the real kubelet, as the hollow-node cases of test/e2e
// (kubelet_test.go, on kubelet v1.37.1) show:
//   - Timing of volumesInUse. The simulator writes a change at once (a volume released
//     after UnmountDelay); kubelet only at its node status writes, every
//     nodeStatusUpdateFrequency (10 s by default), so a new volume is reported, and
//     then staged, up to a period after its pod appeared, and an unstaged volume leaves
//     volumesInUse up to a period after NodeUnstageVolume; meanwhile the pod object is
//     already gone (TestKubeletMountsOnlyAttached).
//   - What it skips. It has no CSI node side: no CSINode or node ID annotation (the
//     local cluster makes CSINodes), no NodeStage/NodePublish with the
//     VolumeAttachment's attachmentMetadata (TestKubeletMountsOnlyAttached), no
//     plugin registration to wait for (csidriver's TestRegistration).
//   - Restarts. A simulator started on existing nodes takes over their volumesInUse;
//     a restarted kubelet keeps its last volumesInUse until its volume manager has
//     rebuilt its state from the pod directories, then stages and publishes every
//     mounted volume again at the same paths, unpublishing and unstaging nothing
//     (asserted by TestKubeletRestartKeepsMountedVolume).
//   - A dead node. SetReady(false) reports Ready False as a live kubelet would; a
//     stopped kubelet (SetRunning(false)) reports nothing, and it is the node lifecycle controller that
//     sets Ready Unknown, a grace period after the last lease renewal
//     (TestKubeletDeadNodeForceDetach).
type Kubelet struct {
	client     kubernetes.Interface
	opts       KubeletOptions
	pods       cache.Indexer
	nodes      corelisters.NodeLister
	csiDrivers storagelisters.CSIDriverLister
	vas        storagelisters.VolumeAttachmentLister
	objects    Objects
	queue      workqueue.TypedRateLimitingInterface[string]

	mu    sync.Mutex
	state map[string]*nodeState
}

// nodeState is what the simulator remembers about one node.
type nodeState struct {
	ready bool
	// stopped: the kubelet does not run, and neither reads nor writes anything.
	stopped bool
	// stuck volumes are reported in use whatever the pods do.
	stuck map[string]bool
	// inUse is the set of volumes reported in use by the last sync.
	inUse map[string]bool
	// releasedAt is when each volume being unmounted stopped being needed.
	releasedAt map[string]time.Time
	// written is the node as returned by the simulator's last status patch, newer
	// than the informer's copy for a moment.
	written *corev1.Node
}

// StartKubelet starts simulating kubelet on opts.Nodes; it runs until ctx is cancelled.
// It returns once the nodes exist (when CreateNodes is set) and its caches are synced.
func StartKubelet(ctx context.Context, cfg *rest.Config, opts KubeletOptions) (*Kubelet, error) {
	return start(ctx, cfg, "sim-kubelet", opts, StartKubeletOn)
}

// StartKubeletOn is StartKubelet on a client of the caller's.
func StartKubeletOn(ctx context.Context, client kubernetes.Interface, opts KubeletOptions) (*Kubelet, error) {
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	if opts.Mounts == nil {
		opts.Mounts = NewMounts()
	}
	k := &Kubelet{client: client, opts: opts, queue: newQueue(), state: map[string]*nodeState{}}
	for _, name := range opts.Nodes {
		k.state[name] = &nodeState{ready: true, stuck: map[string]bool{}, inUse: map[string]bool{}, releasedAt: map[string]time.Time{}}
	}
	if err := k.ensureNodes(ctx); err != nil {
		return nil, err
	}
	if err := k.startInformers(ctx); err != nil {
		return nil, err
	}
	k.seedInUse()
	for _, name := range opts.Nodes {
		k.enqueue(name)
	}
	runWorkers(ctx, "sim-kubelet", opts.Workers, k.queue, k.syncNode)
	return k, nil
}

func (k *Kubelet) ensureNodes(ctx context.Context) error {
	for _, name := range k.opts.Nodes {
		node, err := k.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) && k.opts.CreateNodes:
			if _, err := k.client.CoreV1().Nodes().Create(ctx, NewNode(name), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating node %s: %w", name, err)
			}
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("reading node %s: %w", name, err)
		case node.Annotations[ControllerManagedAnnotation] != "true":
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, ControllerManagedAnnotation)
			if _, err := k.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("annotating node %s: %w", name, err)
			}
		}
	}
	return nil
}

// NewNode returns the Node a Kubelet with CreateNodes creates: Ready, with
// controller-managed attach/detach. Creating the nodes beforehand, in parallel,
// saves a Kubelet on many nodes its one-by-one creates.
func NewNode(name string) *corev1.Node {
	now := metav1.Now()
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{corev1.LabelHostname: name, corev1.LabelOSStable: "linux"},
			Annotations: map[string]string{ControllerManagedAnnotation: "true"},
		},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{readyCondition(true, now)}},
	}
}

func readyCondition(ready bool, now metav1.Time) corev1.NodeCondition {
	cond := corev1.NodeCondition{
		Type:               corev1.NodeReady,
		Status:             corev1.ConditionTrue,
		Reason:             "KubeletReady",
		Message:            "simulated kubelet is posting ready status",
		LastHeartbeatTime:  now,
		LastTransitionTime: now,
	}
	if !ready {
		cond.Status = corev1.ConditionFalse
		cond.Reason = "KubeletNotReady"
		cond.Message = "simulated kubelet is posting not-ready status"
	}
	return cond
}

// startInformers starts the informers the kubelet reads, which, without Period,
// also ask for a sync of every node a change concerns.
func (k *Kubelet) startInformers(ctx context.Context) error {
	factory := informers.NewSharedInformerFactory(k.client, 0)
	podInformer := factory.Core().V1().Pods().Informer()
	nodeOf := func(obj any) []string {
		if pod, ok := obj.(*corev1.Pod); ok && k.simulates(pod.Spec.NodeName) {
			return []string{pod.Spec.NodeName}
		}
		return nil
	}
	if err := podInformer.AddIndexers(cache.Indexers{
		podsByNode: func(obj any) ([]string, error) { return nodeOf(obj), nil },
		podsByClaim: func(obj any) ([]string, error) {
			if pod, ok := obj.(*corev1.Pod); ok && k.simulates(pod.Spec.NodeName) {
				return podClaims(pod), nil
			}
			return nil, nil
		},
	}); err != nil {
		return fmt.Errorf("adding pod indexers: %w", err)
	}
	k.pods = podInformer.GetIndexer()
	k.nodes = factory.Core().V1().Nodes().Lister()
	k.csiDrivers = factory.Storage().V1().CSIDrivers().Lister()
	k.vas = factory.Storage().V1().VolumeAttachments().Lister()
	k.objects = listerObjects(factory.Core().V1().PersistentVolumeClaims().Lister(), factory.Core().V1().PersistentVolumes().Lister())

	handlers := map[cache.SharedIndexInformer]func(obj any) []string{
		podInformer: nodeOf,
		factory.Core().V1().Nodes().Informer(): func(obj any) []string {
			if node, ok := obj.(*corev1.Node); ok && k.simulates(node.Name) {
				return []string{node.Name}
			}
			return nil
		},
		factory.Core().V1().PersistentVolumeClaims().Informer(): func(obj any) []string {
			if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok {
				return k.nodesUsingClaim(pvc.Namespace + "/" + pvc.Name)
			}
			return nil
		},
		factory.Core().V1().PersistentVolumes().Informer(): func(obj any) []string {
			if pv, ok := obj.(*corev1.PersistentVolume); ok && pv.Spec.ClaimRef != nil {
				return k.nodesUsingClaim(pv.Spec.ClaimRef.Namespace + "/" + pv.Spec.ClaimRef.Name)
			}
			return nil
		},
		factory.Storage().V1().CSIDrivers().Informer(): func(any) []string { return k.opts.Nodes },
		factory.Storage().V1().VolumeAttachments().Informer(): func(obj any) []string {
			if va, ok := obj.(*storagev1.VolumeAttachment); ok && k.simulates(va.Spec.NodeName) {
				return []string{va.Spec.NodeName}
			}
			return nil
		},
	}
	for informer, nodes := range handlers {
		if k.opts.Period == nil {
			if _, err := informer.AddEventHandler(enqueueHandler(k.queue, nodes)); err != nil {
				return fmt.Errorf("adding event handler: %w", err)
			}
		}
	}
	return startInformers(ctx, factory, "kubelet simulator")
}

func (k *Kubelet) simulates(node string) bool {
	_, ok := k.state[node]
	return ok
}

func (k *Kubelet) nodesUsingClaim(claim string) []string {
	return lookUp(k.pods, podsByClaim, claim, func(pod *corev1.Pod) string { return pod.Spec.NodeName })
}

// seedInUse takes over what already-existing nodes report in use, as mounted, so
// those volumes are unmounted with the usual delay rather than at once.
func (k *Kubelet) seedInUse() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for name, st := range k.state {
		node, err := k.nodes.Get(name)
		if err != nil {
			continue
		}
		for _, vol := range node.Status.VolumesInUse {
			st.inUse[string(vol)] = true
			k.opts.Mounts.Set(name, string(vol), true)
		}
	}
}

// enqueue asks for a sync of the node: at once, or on its loop with Period.
func (k *Kubelet) enqueue(name string) {
	if k.opts.Period != nil {
		k.queue.AddAfter(name, k.opts.Period())
		return
	}
	k.queue.Add(name)
}

// syncNode brings a node's status and mounts, and with ManagePods its pods, to
// what its pods need, and returns when to sync it again (0 for on the next change).
func (k *Kubelet) syncNode(ctx context.Context, name string) (time.Duration, error) {
	k.mu.Lock()
	st := k.state[name]
	stopped := st.stopped
	k.mu.Unlock()
	node := k.currentNode(name)
	if node == nil || stopped {
		return 0, nil
	}
	objs, err := k.pods.ByIndex(podsByNode, name)
	if err != nil {
		return 0, fmt.Errorf("listing pods of node %s: %w", name, err)
	}
	now := time.Now()
	needed := map[string]Volume{}
	pods := make([]nodePod, 0, len(objs))
	for _, obj := range objs {
		pod := obj.(*corev1.Pod)
		vols, unresolved, err := k.objects.PodVolumes(pod)
		if err != nil {
			return 0, err
		}
		if !PodTerminated(pod) {
			for _, v := range vols {
				needed[v.Name] = v
			}
		}
		pods = append(pods, nodePod{pod: pod, vols: vols, unresolved: unresolved})
	}

	k.mu.Lock()
	inUse, retry := st.update(needed, now, k.opts.UnmountDelay)
	ready := st.ready
	k.mu.Unlock()
	log := klog.FromContext(ctx).WithName("sim-kubelet").V(2)
	for _, vol := range k.opts.Mounts.OnNode(name) {
		if !inUse[vol] {
			k.opts.Mounts.Set(name, vol, false)
			log.Info("Unmounted", "node", name, "volume", vol)
		}
	}
	if patch := statusPatch(node, inUse, ready, now); patch != nil {
		updated, err := k.client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		if err != nil {
			return 0, fmt.Errorf("patching status of node %s: %w", name, err)
		}
		k.mu.Lock()
		st.written = updated
		k.mu.Unlock()
		node = updated
		log.Info("Wrote node status", "node", name, "volumesInUse", updated.Status.VolumesInUse, "ready", ready)
	}
	for _, vol := range slices.Sorted(maps.Keys(needed)) {
		k.mount(ctx, node, needed[vol])
	}
	if k.opts.ManagePods {
		stopAt, err := k.syncPods(ctx, node, pods, inUse, now)
		if err != nil {
			return 0, err
		}
		retry = sooner(retry, stopAt)
	}
	if k.opts.Period != nil {
		return k.opts.Period(), nil
	}
	return retry, nil
}

// update computes the volumes to report in use given those pods need now, and when to
// look again for a volume still being unmounted (0 if none is).
func (st *nodeState) update(needed map[string]Volume, now time.Time, unmountDelay time.Duration) (map[string]bool, time.Duration) {
	for vol := range st.inUse {
		_, isNeeded := needed[vol]
		if _, releasing := st.releasedAt[vol]; !isNeeded && !st.stuck[vol] && !releasing {
			st.releasedAt[vol] = now
		}
	}
	inUse := map[string]bool{}
	for vol := range needed {
		inUse[vol] = true
		delete(st.releasedAt, vol)
	}
	for vol := range st.stuck {
		inUse[vol] = true
		delete(st.releasedAt, vol)
	}
	var recheck time.Duration
	for vol, at := range st.releasedAt {
		left := at.Add(unmountDelay).Sub(now)
		if left <= 0 {
			delete(st.releasedAt, vol)
			continue
		}
		inUse[vol] = true
		recheck = sooner(recheck, left)
	}
	st.inUse = inUse
	return inUse, recheck
}

// currentNode returns the newest known copy of a node: the informer's, or the one the
// last status patch returned. Nil if the node does not exist.
func (k *Kubelet) currentNode(name string) *corev1.Node {
	cached, err := k.nodes.Get(name)
	if err != nil {
		return nil
	}
	k.mu.Lock()
	written := k.state[name].written
	k.mu.Unlock()
	if written != nil && written.UID == cached.UID && resourceVersion(written) > resourceVersion(cached) {
		return written
	}
	return cached
}

// statusPatch returns the strategic merge patch that brings the node's volumesInUse
// and Ready condition to the wanted state, or nil if they are there already.
func statusPatch(node *corev1.Node, inUse map[string]bool, ready bool, now time.Time) []byte {
	status := map[string]any{}
	reported := map[string]bool{}
	for _, vol := range node.Status.VolumesInUse {
		reported[string(vol)] = true
	}
	if !maps.Equal(reported, inUse) {
		if len(inUse) == 0 {
			status["volumesInUse"] = nil
		} else {
			status["volumesInUse"] = slices.Sorted(maps.Keys(inUse))
		}
	}
	if Ready(node) != ready {
		status["conditions"] = []corev1.NodeCondition{readyCondition(ready, metav1.NewTime(now))}
	}
	if len(status) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		panic(fmt.Sprintf("encoding node status patch: %v", err))
	}
	return patch
}

// Ready tells whether a node's Ready condition is True.
func Ready(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// mount mounts a volume a pod needs once node status lists it in use and, if it
// needs attaching, attached, with its VolumeAttachment, for a CSI volume, attached.
func (k *Kubelet) mount(ctx context.Context, node *corev1.Node, v Volume) {
	if k.opts.Mounts.Mounted(node.Name, v.Name) || !slices.Contains(node.Status.VolumesInUse, corev1.UniqueVolumeName(v.Name)) {
		return
	}
	if v.ReportOnly() && !listsAttached(node, v.Name) {
		return
	}
	if !v.ReportOnly() && k.attachRequired(v.Driver) {
		va, err := k.vas.Get(AttachmentName(v.Driver, v.Handle, node.Name))
		if err != nil || !va.Status.Attached || !listsAttached(node, v.Name) {
			return
		}
	}
	k.opts.Mounts.Set(node.Name, v.Name, true)
	klog.FromContext(ctx).WithName("sim-kubelet").V(2).Info("Mounted", "node", node.Name, "volume", v.Name)
}

func listsAttached(node *corev1.Node, volume string) bool {
	return slices.ContainsFunc(node.Status.VolumesAttached, func(av corev1.AttachedVolume) bool { return string(av.Name) == volume })
}

// change changes what the simulator knows of a node and syncs it.
func (k *Kubelet) change(node string, f func(*nodeState)) error {
	k.mu.Lock()
	st, ok := k.state[node]
	if ok {
		f(st)
	}
	k.mu.Unlock()
	if !ok {
		return fmt.Errorf("node %s is not simulated", node)
	}
	k.enqueue(node)
	return nil
}

// SetReady sets a node's Ready condition and waits until the API server has it.
func (k *Kubelet) SetReady(ctx context.Context, node string, ready bool) error {
	if err := k.change(node, func(st *nodeState) { st.ready = ready }); err != nil {
		return err
	}
	return k.waitNode(ctx, node, fmt.Sprintf("ready=%t", ready), func(n *corev1.Node) bool { return Ready(n) == ready })
}

// SetRunning starts or stops the kubelet of a node. A stopped kubelet reads and
// writes nothing and mounts and unmounts nothing; its node's Ready condition is
// left to others, as the node lifecycle controller.
func (k *Kubelet) SetRunning(node string, running bool) error {
	return k.change(node, func(st *nodeState) { st.stopped = !running })
}

// SetStuck makes a node report a volume (by unique name) in use whatever its pods do,
// as when an unmount hangs; with stuck false the volume unmounts normally again.
func (k *Kubelet) SetStuck(node, volume string, stuck bool) error {
	return k.change(node, func(st *nodeState) {
		if stuck {
			st.stuck[volume] = true
		} else {
			delete(st.stuck, volume)
		}
	})
}

// WaitAttached waits until the node's status.volumesAttached lists the volume, or
// no longer does, as the simulator's cache has it.
func (k *Kubelet) WaitAttached(ctx context.Context, node, volume string, attached bool) error {
	return k.waitNode(ctx, node, fmt.Sprintf("volume %s attached=%t", volume, attached), func(n *corev1.Node) bool {
		return listsAttached(n, volume) == attached
	})
}

// WaitInUse waits until the node's status.volumesInUse lists the volume, or no
// longer does, as the simulator's cache has it.
func (k *Kubelet) WaitInUse(ctx context.Context, node, volume string, inUse bool) error {
	return k.waitNode(ctx, node, fmt.Sprintf("volume %s in use=%t", volume, inUse), func(n *corev1.Node) bool {
		return slices.Contains(n.Status.VolumesInUse, corev1.UniqueVolumeName(volume)) == inUse
	})
}

// waitNode waits until cond holds for the node in the simulator's cache, a
// missing node counting as one with an empty status.
func (k *Kubelet) waitNode(ctx context.Context, node, what string, cond func(*corev1.Node) bool) error {
	err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		n, err := k.nodes.Get(node)
		if err != nil {
			n = &corev1.Node{}
		}
		return cond(n), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s on node %s: %w", what, node, err)
	}
	return nil
}
