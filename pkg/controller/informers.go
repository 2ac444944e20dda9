package controller

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	storageinformers "k8s.io/client-go/informers/storage/v1"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/attachments"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/interleave"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/populator"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/trim"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/watchrecord"
)

type informerSet struct {
	pods        coreinformers.PodInformer
	nodes       coreinformers.NodeInformer
	claims      coreinformers.PersistentVolumeClaimInformer
	pvs         coreinformers.PersistentVolumeInformer
	drivers     storageinformers.CSIDriverInformer
	csiNodes    storageinformers.CSINodeInformer
	attachments storageinformers.VolumeAttachmentInformer
	// attachmentWatches records the lapses of the attachments informer, and
	// attachmentReads its quorum reads.
	attachmentWatches *watchrecord.Lapses
	attachmentReads   *watchrecord.Reads
	// podGaps records the gaps in what the pod informer shows; podReads and
	// nodeReads the quorum reads of the pod and node informers.
	podGaps   *watchrecord.Gaps
	podReads  *watchrecord.Reads
	nodeReads *watchrecord.Reads
}

// StartInformers requests the controller's informers from the factory and starts
// them until ctx ends. A standby replica calls it before it leads, so that when it
// takes over its caches are full: it then only waits for them to be current and
// rebuilds its state. Informers only read; nothing is written before Run.
func StartInformers(ctx context.Context, factory informers.SharedInformerFactory) error {
	if _, err := newInformerSet(factory); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	return nil
}

// PreparedLine is logged once a standby's informers have synced and its state
// is filled from them (Controller.Prepare): from then on it is ready to take over
// from memory.
const PreparedLine = "Informers synced and state filled: ready to take over"

// WaitForInformers waits until every informer started from factory has synced,
// and fails naming one that had not when ctx ended.
func WaitForInformers(ctx context.Context, factory informers.SharedInformerFactory) error {
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer for %v did not sync: %w", typ, ctx.Err())
		}
	}
	return nil
}

func newInformerSet(f informers.SharedInformerFactory) (informerSet, error) {
	// The VolumeAttachment, pod and node informers are made first, with the
	// records of their watches.
	lapses, reads, err := watchrecord.AttachmentLapses(f)
	if err != nil {
		return informerSet{}, err
	}
	gaps, podReads, err := watchrecord.PodGaps(f)
	if err != nil {
		return informerSet{}, err
	}
	nodeReads, err := watchrecord.NodeReads(f)
	if err != nil {
		return informerSet{}, err
	}
	s := informerSet{
		pods:              f.Core().V1().Pods(),
		podGaps:           gaps,
		podReads:          podReads,
		nodeReads:         nodeReads,
		nodes:             f.Core().V1().Nodes(),
		claims:            f.Core().V1().PersistentVolumeClaims(),
		pvs:               f.Core().V1().PersistentVolumes(),
		drivers:           f.Storage().V1().CSIDrivers(),
		csiNodes:          f.Storage().V1().CSINodes(),
		attachments:       f.Storage().V1().VolumeAttachments(),
		attachmentWatches: lapses,
		attachmentReads:   reads,
	}
	// The index is added once per informer: StartInformers may have added it.
	pods := s.pods.Informer()
	if _, ok := pods.GetIndexer().GetIndexers()[populator.ClaimIndex]; !ok {
		if err := pods.AddIndexers(toolscache.Indexers{populator.ClaimIndex: populator.ClaimIndexFunc}); err != nil {
			return s, fmt.Errorf("adding the pod claim index: %w", err)
		}
	}
	// Touch every informer so that the factory starts and syncs it.
	s.claims.Informer()
	s.pvs.Informer()
	s.drivers.Informer()
	s.csiNodes.Informer()
	s.attachments.Informer()
	s.nodes.Informer()
	return s, nil
}

// readable is a resource the informers list and watch, with a list of at most
// one of its objects.
type readable struct {
	resource string
	list     func(ctx context.Context, client kubernetes.Interface, opts metav1.ListOptions) error
}

// readables are the resources of newInformerSet (TestReadablesAreWhatTheInformersRead).
var readables = []readable{
	{"pods", func(ctx context.Context, c kubernetes.Interface, o metav1.ListOptions) error {
		_, err := c.CoreV1().Pods("").List(ctx, o)
		return err
	}},
	{"nodes", func(ctx context.Context, c kubernetes.Interface, o metav1.ListOptions) error {
		_, err := c.CoreV1().Nodes().List(ctx, o)
		return err
	}},
	{"persistentvolumeclaims", func(ctx context.Context, c kubernetes.Interface, o metav1.ListOptions) error {
		_, err := c.CoreV1().PersistentVolumeClaims("").List(ctx, o)
		return err
	}},
	{"persistentvolumes", func(ctx context.Context, c kubernetes.Interface, o metav1.ListOptions) error {
		_, err := c.CoreV1().PersistentVolumes().List(ctx, o)
		return err
	}},
	{"csidrivers", func(ctx context.Context, c kubernetes.Interface, o metav1.ListOptions) error {
		_, err := c.StorageV1().CSIDrivers().List(ctx, o)
		return err
	}},
	{"csinodes", func(ctx context.Context, c kubernetes.Interface, o metav1.ListOptions) error {
		_, err := c.StorageV1().CSINodes().List(ctx, o)
		return err
	}},
	{"volumeattachments", func(ctx context.Context, c kubernetes.Interface, o metav1.ListOptions) error {
		_, err := c.StorageV1().VolumeAttachments().List(ctx, o)
		return err
	}},
}

// ReadResources names the resources the controller lists and watches.
func ReadResources() []string {
	names := make([]string, 0, len(readables))
	for _, r := range readables {
		names = append(names, r.resource)
	}
	return names
}

// CheckCanList lists one object of each resource the controller reads, so that
// a client without the permissions fails at once with the API server's words
// rather than leave informers retrying.
func CheckCanList(ctx context.Context, client kubernetes.Interface) error {
	for _, r := range readables {
		if err := r.list(ctx, client, metav1.ListOptions{Limit: 1}); err != nil {
			return fmt.Errorf("listing %s: %w", r.resource, err)
		}
	}
	return nil
}

// registerHandlers connects informer events to the state and the queues.
// It returns, per handler, what tells once the handler has been given every
// object the informer held when it was registered.
func (c *Controller) registerHandlers(ctx context.Context) ([]toolscache.DoneChecker, error) {
	type handler struct {
		informer    toolscache.SharedIndexInformer
		funcs       toolscache.ResourceEventHandler
		// attachments marks the VolumeAttachment informer's handler, which the
		// take-over waits for after that informer's own check.
		attachments bool
	}
	// A claim, PersistentVolume or CSIDriver the informer held when its handler
	// was registered (initial) re-evaluates no pod: every pod held then is
	// delivered too, and evaluated from caches that already hold it.
	handlers := []handler{
		{informer: c.informers.pods.Informer(), funcs: toolscache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueuePod,
			UpdateFunc: func(oldObj, obj any) { c.onPodUpdate(ctx, oldObj, obj) },
			DeleteFunc: func(obj any) { c.onPodDelete(ctx, obj) },
		}},
		{informer: c.informers.claims.Informer(), funcs: toolscache.ResourceEventHandlerDetailedFuncs{
			AddFunc:    unlessInitial(c.onClaim),
			UpdateFunc: func(_, obj any) { c.onClaim(obj) },
			DeleteFunc: c.onClaim,
		}},
		{informer: c.informers.pvs.Informer(), funcs: toolscache.ResourceEventHandlerDetailedFuncs{
			AddFunc:    func(obj any, initial bool) { c.onPV(ctx, obj, !initial) },
			UpdateFunc: func(_, obj any) { c.onPV(ctx, obj, true) },
			DeleteFunc: func(obj any) { c.onPV(ctx, obj, true) },
		}},
		{informer: c.informers.drivers.Informer(), funcs: toolscache.ResourceEventHandlerDetailedFuncs{
			AddFunc:    unlessInitial(c.onCSIDriver),
			UpdateFunc: func(_, obj any) { c.onCSIDriver(obj) },
			DeleteFunc: c.onCSIDriver,
		}},
		{informer: c.informers.csiNodes.Informer(), funcs: toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.onCSINode(obj) },
			UpdateFunc: func(_, obj any) { c.onCSINode(obj) },
		}},
		{informer: c.informers.nodes.Informer(), funcs: toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) {
				c.onNode(nil, obj)
				c.identifyOnNode(ctx, obj)
			},
			UpdateFunc: func(oldObj, obj any) {
				c.onNode(oldObj, obj)
				c.identifyOnNode(ctx, obj)
			},
			DeleteFunc: c.onNodeDelete,
		}},
		{informer: c.informers.attachments.Informer(), funcs: toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.onVolumeAttachment(ctx, obj) },
			UpdateFunc: func(_, obj any) { c.onVolumeAttachment(ctx, obj) },
			DeleteFunc: c.onVolumeAttachmentDelete,
		}, attachments: true},
	}
	synced := make([]toolscache.DoneChecker, 0, len(handlers))
	for _, h := range handlers {
		d := newDelivered(h.informer.GetStore())
		if h.attachments {
			c.attachmentsDelivered = d
		} else {
			c.delivered = append(c.delivered, d)
		}
		reg, err := h.informer.AddEventHandler(interleave.Handler(ctx, d.handler(h.funcs)))
		if err != nil {
			return nil, fmt.Errorf("registering an event handler: %w", err)
		}
		synced = append(synced, reg.HasSyncedChecker())
	}
	return synced, nil
}

// unlessInitial is an add handler that calls f except for the objects the
// informer held when the handler was registered.
func unlessInitial(f func(obj any)) func(obj any, initial bool) {
	return func(obj any, initial bool) {
		if !initial {
			f(obj)
		}
	}
}

func objectKey(obj any) string {
	key, err := toolscache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return ""
	}
	return key
}

func (c *Controller) enqueuePod(obj any) {
	if key := objectKey(obj); key != "" {
		c.populator.Enqueue(key)
	}
}

// onPodUpdate queues the pod; a pod that stops counting (it terminated) hands
// its last counting state to the populator, which may never have recorded it.
func (c *Controller) onPodUpdate(ctx context.Context, oldObj, obj any) {
	old, wasPod := oldObj.(*v1.Pod)
	pod, isPod := obj.(*v1.Pod)
	if wasPod && isPod && !populator.NeedsVolumes(pod) {
		c.populator.PodEnded(ctx, old)
	}
	c.enqueuePod(obj)
}

// onPodDelete queues the pod and hands its last state to the populator, which
// may never have recorded it.
func (c *Controller) onPodDelete(ctx context.Context, obj any) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if pod, ok := obj.(*v1.Pod); ok {
		c.populator.PodEnded(ctx, pod)
	}
	c.enqueuePod(obj)
}

func (c *Controller) enqueuePods(keys []string) {
	for _, key := range keys {
		c.populator.Enqueue(key)
	}
}

func (c *Controller) onClaim(obj any) {
	key := objectKey(obj)
	namespace, name, err := toolscache.SplitMetaNamespaceKey(key)
	if err != nil || key == "" {
		return
	}
	c.enqueuePods(c.populator.PodsForClaim(namespace, name))
}

// onPV identifies the VolumeAttachments that name the PersistentVolume and, if
// reevaluate, queues the pods that reach it.
func (c *Controller) onPV(ctx context.Context, obj any, reevaluate bool) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pv, ok := obj.(*v1.PersistentVolume)
	if !ok {
		return
	}
	if reevaluate {
		c.enqueuePods(c.populator.PodsForPV(pv))
	}
	c.attachments.IdentifyForPV(ctx, pv.Name)
}

func (c *Controller) onCSIDriver(obj any) {
	if key := objectKey(obj); key != "" {
		c.enqueuePods(c.populator.PodsForDriver(key))
	}
}

// onCSINode retries at once the attaches to a node that were backing off, since a
// driver registering on the node is often what they were waiting for.
func (c *Controller) onCSINode(obj any) {
	csiNode, ok := obj.(*storagev1.CSINode)
	if !ok {
		return
	}
	for _, v := range c.desired.VolumesOnNode(csiNode.Name) {
		if c.executor.ResetBackoff(v, csiNode.Name) {
			c.reconciler.Enqueue(v)
		}
	}
}

func (c *Controller) onNode(oldObj, newObj any) {
	node, ok := newObj.(*v1.Node)
	if !ok {
		return
	}
	c.nodesMu.Lock()
	defer c.nodesMu.Unlock()
	now := cache.NodeFromObject(node)
	prev := c.nodes.Set(now)
	if nodeDecisionsChanged(prev, now) {
		c.enqueueNodeVolumes(node.Name)
	}
	// A node deleted and created again under its name while the informer did
	// not watch comes back from its relist as an update: the new object holds
	// none of the old one's status, whatever the two copies show.
	old, _ := oldObj.(*v1.Node)
	if now.Managed && (old == nil || old.UID != node.UID || prev.Managed != now.Managed ||
		!equality.Semantic.DeepEqual(old.Status.VolumesAttached, node.Status.VolumesAttached)) {
		c.status.Enqueue(node.Name)
	}
}

// nodeDecisionsChanged tells whether a node change can change an attach or
// detach decision.
func nodeDecisionsChanged(prev, now cache.Node) bool {
	if prev.Presence != now.Presence || prev.Managed != now.Managed || prev.Ready != now.Ready || prev.OutOfService != now.OutOfService ||
		prev.Shutdown != now.Shutdown {
		return true
	}
	if len(prev.InUse) != len(now.InUse) {
		return true
	}
	for v := range prev.InUse {
		if _, ok := now.InUse[v]; !ok {
			return true
		}
	}
	return false
}

// onNodeDelete records the node's deletion with its final state when the watch
// delivered it; a tombstone from a relist holds only the last state the informer
// had, which may predate kubelet's last report.
func (c *Controller) onNodeDelete(obj any) {
	c.nodesMu.Lock()
	defer c.nodesMu.Unlock()
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		if name := objectKey(t); name != "" {
			c.forgetNode(name, nil)
		}
		return
	}
	if node, ok := obj.(*v1.Node); ok {
		c.forgetNode(node.Name, node)
	}
}

// forgetNode records that the node's object is gone; final is the object as it
// was deleted, nil when that is not known. The record of the deletion is
// forgotten once nothing is recorded on the node (see forget.go).
func (c *Controller) forgetNode(name string, final *v1.Node) {
	c.nodes.MarkDeleted(name, final)
	c.status.Forget(name)
	c.enqueueNodeVolumes(name)
	c.deletedNodes.Add(name)
}

func (c *Controller) enqueueNodeVolumes(node string) {
	for _, v := range c.desired.VolumesOnNode(node) {
		c.reconciler.Enqueue(v)
	}
	for _, v := range c.actual.VolumesOnNode(node) {
		if !c.desired.IsDesired(v, node) {
			c.reconciler.Enqueue(v)
		}
	}
}

func (c *Controller) onVolumeAttachment(ctx context.Context, obj any) {
	if va, ok := obj.(*storagev1.VolumeAttachment); ok {
		c.attachments.Observe(ctx, va)
		if writing := c.writing.Load(); writing != nil && va.Name == attachments.CacheProbe {
			go c.removeCacheProbe(*writing)
		}
	}
}

func (c *Controller) onVolumeAttachmentDelete(obj any) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if va, ok := obj.(*storagev1.VolumeAttachment); ok {
		c.attachments.Deleted(va)
	}
}

// identifyOnNode looks again at the VolumeAttachments on the node whose volume
// was not known: the node's status may list it now.
func (c *Controller) identifyOnNode(ctx context.Context, obj any) {
	if node, ok := obj.(*v1.Node); ok {
		c.attachments.IdentifyOnNode(ctx, node.Name)
	}
}

// NewInformerFactory returns the shared informer factory the controller runs on:
// no informer resync (the controller has its own periodic pass), and objects kept
// only with what the controller reads (see package trim).
func NewInformerFactory(client kubernetes.Interface) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(trim.Object))
}
