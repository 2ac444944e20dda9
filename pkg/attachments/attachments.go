// Package attachments keeps the actual state in step with the VolumeAttachments
// the informer shows, as package populator keeps the desired state in step with
// pods: each object is recorded with the volume it is for, found by its inline
// spec, its PV or, as a last resort, the lists in its node's status. An object
// whose volume cannot be found yet counts as holding its PV, and is looked at
// again when its PV or its node changes. The periodic pass (Reconcile) brings the
// records in line with the informer under the lock the event handlers take.
package attachments

import (
	"context"
	"fmt"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/interleave"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/populator"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// Listers are the informer caches the recorder reads.
type Listers struct {
	Attachments storagelisters.VolumeAttachmentLister
	PVs         corelisters.PersistentVolumeLister
	Nodes       corelisters.NodeLister
}

// PVVolumes tells which volume a PV is (populator.Populator).
type PVVolumes interface {
	VolumeOfPV(pv *v1.PersistentVolume) (cache.Volume, bool, error)
}

// Executor is the part of the operation executor that waits for
// VolumeAttachments and settles what only the API server can tell.
type Executor interface {
	// ObserveVolumeAttachment passes what the informer saw of a
	// VolumeAttachment (nil once deleted) to the operations waiting for it.
	ObserveVolumeAttachment(name string, va *storagev1.VolumeAttachment)
	// Settle reads an object whose existence or deletion only the API server
	// can settle, and records what it learns.
	Settle(ctx context.Context, att cache.Attachment)
	// WaitsFor tells whether a running operation waits for what the informer
	// shows of the VolumeAttachment; the operation's end queues its volume.
	WaitsFor(name string) bool
}

// NodeQueue takes the nodes whose status is to be written (the status updater).
type NodeQueue interface {
	Enqueue(node string)
}

// VolumeQueue takes the volumes to reconcile (the reconciler's queue).
type VolumeQueue interface {
	Enqueue(volume volumename.UniqueName)
}

// Config holds what a Recorder reads and whom it tells.
type Config struct {
	Listers    Listers
	Actual     *cache.ActualState
	PVs        PVVolumes
	Executor   Executor
	NodeStatus NodeQueue
	Volumes    VolumeQueue
}

// CacheProbe is the name of the VolumeAttachment a new leader creates, and
// deletes again, to prove its informer current (see package controller): it is
// the record of no attachment, and the recorder skips it.
const CacheProbe = "attachdetach-controller-cache-probe"

// Recorder records VolumeAttachments in the actual state.
type Recorder struct {
	cfg Config
	// mu keeps the event handlers out while the periodic pass compares.
	mu sync.Mutex
}

// New returns a Recorder.
func New(cfg Config) *Recorder { return &Recorder{cfg: cfg} }

// Observe records an object the informer added or updated, then passes it to
// the operations waiting for it.
func (r *Recorder) Observe(ctx context.Context, va *storagev1.VolumeAttachment) {
	r.mu.Lock()
	if va.Name != CacheProbe {
		r.observe(ctx, va)
	}
	r.mu.Unlock()
	r.cfg.Executor.ObserveVolumeAttachment(va.Name, va)
}

// Deleted records that the informer deleted the object.
func (r *Recorder) Deleted(va *storagev1.VolumeAttachment) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forget(va.Name, va.UID)
}

// IdentifyOnNode looks again at the objects on the node whose volume was not
// known: the node's status may list it now.
func (r *Recorder) IdentifyOnNode(ctx context.Context, node string) {
	names := r.cfg.Actual.UnresolvedOnNode(node)
	if len(names) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.observeNamed(ctx, names)
}

// IdentifyForPV looks again at the objects of the PV whose volume was not
// known: the PV may exist now.
func (r *Recorder) IdentifyForPV(ctx context.Context, pv string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.observeNamed(ctx, r.cfg.Actual.UnresolvedForPV(pv))
}

// observeNamed observes the named objects the informer holds.
func (r *Recorder) observeNamed(ctx context.Context, names []string) {
	for _, name := range names {
		if va, err := r.cfg.Listers.Attachments.Get(name); err == nil {
			r.observe(ctx, va)
		}
	}
}

// forget records that the object of that name and UID is gone.
func (r *Recorder) forget(name string, uid types.UID) {
	if att, ok := r.cfg.Actual.Forget(name, uid); ok {
		r.cfg.NodeStatus.Enqueue(att.Node)
		r.reconcileUnlessAwaited(att.Volume, name)
	}
	r.cfg.Executor.ObserveVolumeAttachment(name, nil)
}

// observe records what a VolumeAttachment says in the actual state.
func (r *Recorder) observe(ctx context.Context, va *storagev1.VolumeAttachment) {
	vol, ok := r.VolumeOf(va)
	if !ok {
		pvName := ""
		if va.Spec.Source.PersistentVolumeName != nil {
			pvName = *va.Spec.Source.PersistentVolumeName
		}
		klog.FromContext(ctx).Info("Cannot identify the volume of a VolumeAttachment yet; it counts as holding its PV",
			"volumeAttachment", va.Name, "pv", pvName, "node", va.Spec.NodeName)
		if r.cfg.Actual.ObserveUnresolved(cache.UnresolvedAttachment{VolumeAttachment: va.Name, PVName: pvName, Node: va.Spec.NodeName}) {
			r.cfg.NodeStatus.Enqueue(va.Spec.NodeName)
		}
		return
	}
	o := cache.Observation{
		Volume:           vol.Name,
		MultiAttach:      vol.MultiAttach,
		Migrated:         vol.Migrated,
		Node:             va.Spec.NodeName,
		VolumeAttachment: va.Name,
		UID:              va.UID,
		Attached:         va.Status.Attached,
		Deleting:         va.DeletionTimestamp != nil,
	}
	if va.Status.AttachError != nil {
		o.AttachError = va.Status.AttachError.Message
	}
	if va.Status.DetachError != nil {
		o.DetachError = va.Status.DetachError.Message
	}
	if r.cfg.Actual.Observe(o) {
		r.cfg.NodeStatus.Enqueue(o.Node)
	}
	r.reconcileUnlessAwaited(vol.Name, va.Name)
}

// reconcileUnlessAwaited queues the volume after a change of one of its
// VolumeAttachments, unless an operation waits for that object: the operation's
// end, which comes after the change, queues the volume, and a Sync before it
// could only find the operation still running.
func (r *Recorder) reconcileUnlessAwaited(volume volumename.UniqueName, attachment string) {
	if !r.cfg.Executor.WaitsFor(attachment) {
		r.cfg.Volumes.Enqueue(volume)
	}
}

// VolumeOf finds the volume a VolumeAttachment is for, by its inline spec, its
// PV, or as a last resort the node's status lists. A volume found only in node
// status counts as single-attach: nothing says otherwise.
func (r *Recorder) VolumeOf(va *storagev1.VolumeAttachment) (cache.Volume, bool) {
	if spec := va.Spec.Source.InlineVolumeSpec; spec != nil {
		if vol, ok := populator.VolumeOfInlineSpec(spec); ok {
			return vol, true
		}
	}
	if pvName := va.Spec.Source.PersistentVolumeName; pvName != nil {
		if pv, err := r.cfg.Listers.PVs.Get(*pvName); err == nil {
			if vol, ok, err := r.cfg.PVs.VolumeOfPV(pv); err == nil && ok {
				return vol, true
			}
		}
	}
	node, err := r.cfg.Listers.Nodes.Get(va.Spec.NodeName)
	if err != nil {
		return cache.Volume{}, false
	}
	var candidates []string
	for _, av := range node.Status.VolumesAttached {
		candidates = append(candidates, string(av.Name))
	}
	for _, n := range node.Status.VolumesInUse {
		candidates = append(candidates, string(n))
	}
	i := slices.IndexFunc(candidates, func(n string) bool {
		driver, handle, err := volumename.ParseUniqueName(volumename.UniqueName(n))
		return err == nil && driver == va.Spec.Attacher && volumename.AttachmentName(handle, driver, va.Spec.NodeName) == va.Name
	})
	if i < 0 {
		return cache.Volume{}, false
	}
	return cache.Volume{Name: volumename.UniqueName(candidates[i])}, true
}

// Reconcile brings the actual state in line with the informer: objects it holds
// that the state lacks are recorded, and objects the informer showed once but
// holds no more are forgotten. Objects the controller created, or tried to, and
// never saw, and objects whose delete had an unknown outcome, are then read from
// the API server, unless an operation on them runs.
//
// The comparison runs under the lock the event handlers take: an informer's
// cache holds an event before its handlers are told, so under the lock nothing
// recorded is newer than the informer's cache, and an event handled after the
// list applies after the pass's changes. A list taken before the records were
// read would forget an object added in between, and bring back one deleted in
// between.
func (r *Recorder) Reconcile(ctx context.Context) error {
	inInformer, err := r.recordInformer(ctx)
	if err != nil {
		return err
	}
	for _, att := range r.cfg.Actual.Unsettled() {
		if att.DeleteUnsettled || !inInformer[att.VolumeAttachment] {
			r.cfg.Executor.Settle(ctx, att)
		}
	}
	return nil
}

// recordInformer makes the actual state record what the informer holds, and
// returns the names it held.
func (r *Recorder) recordInformer(ctx context.Context) (map[string]bool, error) {
	interleave.At(ctx, "resync-attachments", "")
	r.mu.Lock()
	defer r.mu.Unlock()
	vas, err := r.cfg.Listers.Attachments.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing VolumeAttachments from the informer: %w", err)
	}
	recorded := r.cfg.Actual.ObjectNames()
	inInformer := make(map[string]bool, len(vas))
	for _, va := range vas {
		if va.Name == CacheProbe {
			continue
		}
		inInformer[va.Name] = true
		if uid, ok := recorded[va.Name]; !ok || uid != va.UID {
			r.observe(ctx, va)
		}
	}
	for name, uid := range recorded {
		if !inInformer[name] {
			r.forget(name, uid)
		}
	}
	return inInformer, nil
}
