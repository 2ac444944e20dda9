package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

// observer records, from watches in the benchmark process, when each volume's pod,
// VolumeAttachment, status.attached and node status entry were first seen, when its
// pod's SuccessfulAttachVolume event was, and when the last VolumeAttachment and the
// last node status entry went away; which volumes each node's status lists now, who
// holds each Lease since when, and when each Lease was last released.
//
// Volumes are keyed by their claim's name, which their pod has too; their
// PersistentVolume and volume handle are named <namespace>-<claim>
// (workload.NewVolume).
type observer struct {
	pvPrefix string // what a PersistentVolume's name adds to its claim's
	prefix   string // what a volume's unique name adds to its claim's

	mu           sync.Mutex
	podSeen      map[string]time.Time
	vaSeen       map[string]time.Time
	attachedSeen map[string]time.Time
	inStatusSeen map[string]time.Time
	eventSeen    map[string]time.Time       // pod name -> first SuccessfulAttachVolume event
	lastEvent    time.Time                  // when the last new SuccessfulAttachVolume event came
	liveVAs      map[string]bool            // VolumeAttachment names that exist
	nodeVolumes  map[string]map[string]bool // node name -> benchmark volumes in its status
	nonEmpty     int                        // nodes with benchmark volumes in their status
	vasGoneAt    time.Time                  // when liveVAs last became empty
	nodesEmptyAt time.Time                  // when nonEmpty last dropped to 0
	leases       map[string]holder          // namespace/name -> current holder of the Lease
	releases     map[string]time.Time       // namespace/name -> when the Lease was last seen released
}

// holder is a Lease's holder, when the observer first saw it hold the Lease, and the
// spec.acquireTime it wrote: its own clock as it sent the write that took the Lease.
type holder struct {
	identity string
	since    time.Time
	acquired time.Time
}

// startObserver watches pods, events, VolumeAttachments and nodes until ctx ends, and
// returns once its caches are synced.
func startObserver(ctx context.Context, w *workload.Workload) (*observer, error) {
	pvPrefix := w.NewVolume("", workload.VolumeOptions{}).PV
	o := &observer{
		pvPrefix:     pvPrefix,
		prefix:       sim.UniqueVolumeName(w.Driver, pvPrefix),
		podSeen:      map[string]time.Time{},
		vaSeen:       map[string]time.Time{},
		attachedSeen: map[string]time.Time{},
		inStatusSeen: map[string]time.Time{},
		eventSeen:    map[string]time.Time{},
		liveVAs:      map[string]bool{},
		nodeVolumes:  map[string]map[string]bool{},
		leases:       map[string]holder{},
		releases:     map[string]time.Time{},
	}
	factory := informers.NewSharedInformerFactoryWithOptions(w.Client, 0, informers.WithNamespace(w.Namespace))
	clusterFactory := informers.NewSharedInformerFactory(w.Client, 0)
	handlers := []struct {
		informer cache.SharedIndexInformer
		funcs    cache.ResourceEventHandlerFuncs
	}{
		{factory.Core().V1().Pods().Informer(), cache.ResourceEventHandlerFuncs{AddFunc: o.onPod}},
		{factory.Core().V1().Events().Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    o.onEvent,
			UpdateFunc: func(_, obj any) { o.onEvent(obj) },
		}},
		{clusterFactory.Storage().V1().VolumeAttachments().Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    o.onVA,
			UpdateFunc: func(_, obj any) { o.onVA(obj) },
			DeleteFunc: o.onVADelete,
		}},
		{clusterFactory.Core().V1().Nodes().Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    o.onNode,
			UpdateFunc: func(_, obj any) { o.onNode(obj) },
		}},
		{clusterFactory.Coordination().V1().Leases().Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    o.onLease,
			UpdateFunc: func(_, obj any) { o.onLease(obj) },
		}},
	}
	for _, h := range handlers {
		if _, err := h.informer.AddEventHandler(h.funcs); err != nil {
			return nil, fmt.Errorf("adding observer event handler: %w", err)
		}
	}
	for _, f := range []informers.SharedInformerFactory{factory, clusterFactory} {
		f.Start(ctx.Done())
		go func() {
			<-ctx.Done()
			f.Shutdown()
		}()
		if err := f.WaitForCacheSyncWithContext(ctx).AsError(); err != nil {
			return nil, fmt.Errorf("syncing observer caches: %w", err)
		}
	}
	return o, nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func firstSeen(m map[string]time.Time, key string, now time.Time) {
	if _, ok := m[key]; !ok {
		m[key] = now
	}
}

func (o *observer) onPod(obj any) {
	now := time.Now()
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	firstSeen(o.podSeen, pod.Name, now)
}

func (o *observer) onEvent(obj any) {
	now := time.Now()
	ev, ok := obj.(*corev1.Event)
	if !ok || ev.Reason != attachedReason || ev.InvolvedObject.Kind != "Pod" {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, seen := o.eventSeen[ev.InvolvedObject.Name]; !seen {
		o.eventSeen[ev.InvolvedObject.Name] = now
		o.lastEvent = now
	}
}

func (o *observer) onVA(obj any) {
	now := time.Now()
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok || va.Spec.Source.PersistentVolumeName == nil {
		return
	}
	volume := strings.TrimPrefix(*va.Spec.Source.PersistentVolumeName, o.pvPrefix)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.liveVAs[va.Name] = true
	firstSeen(o.vaSeen, volume, now)
	if va.Status.Attached {
		firstSeen(o.attachedSeen, volume, now)
	}
}

func (o *observer) onVADelete(obj any) {
	now := time.Now()
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.liveVAs[va.Name] {
		delete(o.liveVAs, va.Name)
		if len(o.liveVAs) == 0 {
			o.vasGoneAt = now
		}
	}
}

func (o *observer) onNode(obj any) {
	now := time.Now()
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	volumes := map[string]bool{}
	for _, av := range node.Status.VolumesAttached {
		if volume, ok := strings.CutPrefix(string(av.Name), o.prefix); ok {
			volumes[volume] = true
			firstSeen(o.inStatusSeen, volume, now)
		}
	}
	before := len(o.nodeVolumes[node.Name])
	o.nodeVolumes[node.Name] = volumes
	switch {
	case before == 0 && len(volumes) > 0:
		o.nonEmpty++
	case before > 0 && len(volumes) == 0:
		o.nonEmpty--
		if o.nonEmpty == 0 {
			o.nodesEmptyAt = now
		}
	}
}

func (o *observer) onLease(obj any) {
	now := time.Now()
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	identity := ""
	if lease.Spec.HolderIdentity != nil {
		identity = *lease.Spec.HolderIdentity
	}
	var acquired time.Time
	if lease.Spec.AcquireTime != nil {
		acquired = lease.Spec.AcquireTime.Time
	}
	key := lease.Namespace + "/" + lease.Name
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.leases[key].identity == identity {
		return
	}
	o.leases[key] = holder{identity: identity, since: now, acquired: acquired}
	if identity == "" {
		o.releases[key] = now
	}
}

// leaseHolder returns the holder of the Lease namespace/name and when the observer
// first saw it hold the Lease; an empty identity if none holds it.
func (o *observer) leaseHolder(key string) holder {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.leases[key]
}

// releasedSince tells whether the observer has seen the Lease namespace/name
// released, its holder emptied as client-go's leader elector does on leaving, since t.
func (o *observer) releasedSince(key string, t time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return !o.releases[key].Before(t)
}

// moved tells whether a volume has left node from (its VolumeAttachment named
// fromVA gone, the volume absent from from's status) and is in to's status.
func (o *observer) moved(volume, from, fromVA, to string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return !o.liveVAs[fromVA] && !o.nodeVolumes[from][volume] && o.nodeVolumes[to][volume]
}

// listed tells whether node's status lists the volume.
func (o *observer) listed(node, volume string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.nodeVolumes[node][volume]
}

// detached tells whether a volume's VolumeAttachment named va is gone and the
// volume is absent from node's status.
func (o *observer) detached(volume, node, va string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return !o.liveVAs[va] && !o.nodeVolumes[node][volume]
}

// withAttachEvent counts the volumes whose pod has had a SuccessfulAttachVolume
// event.
func (o *observer) withAttachEvent(volumes []string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, v := range volumes {
		if _, ok := o.eventSeen[v]; ok {
			n++
		}
	}
	return n
}

// allInStatus tells whether every volume has been seen in node status.
func (o *observer) allInStatus(volumes []string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, v := range volumes {
		if _, ok := o.inStatusSeen[v]; !ok {
			return false
		}
	}
	return true
}

// eventsSettled tells whether every volume's pod has had its SuccessfulAttachVolume
// event, or no new one has come for quiet since the later of since and the last one
// (event recorders drop events when their queue overflows).
func (o *observer) eventsSettled(volumes []string, since time.Time, quiet time.Duration) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if time.Since(later(since, o.lastEvent)) > quiet {
		return true
	}
	for _, v := range volumes {
		if _, ok := o.eventSeen[v]; !ok {
			return false
		}
	}
	return true
}

// allGone tells whether no VolumeAttachment exists and no node lists a volume.
func (o *observer) allGone() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.liveVAs) == 0 && o.nonEmpty == 0
}

// volumeTimes are the first-seen times of one volume.
type volumeTimes struct {
	pod, va, attached, inStatus time.Time
}

// times returns the first-seen times of the volumes.
func (o *observer) times(volumes []string) []volumeTimes {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]volumeTimes, len(volumes))
	for i, v := range volumes {
		out[i] = volumeTimes{pod: o.podSeen[v], va: o.vaSeen[v], attached: o.attachedSeen[v], inStatus: o.inStatusSeen[v]}
	}
	return out
}

// goneTimes returns when the last VolumeAttachment went and when the last node
// status entry went.
func (o *observer) goneTimes() (vasGone, nodesEmpty time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.vasGoneAt, o.nodesEmptyAt
}
