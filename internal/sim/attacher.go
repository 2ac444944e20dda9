package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

const attachmentsByPV = "byPV"

// AttacherOptions configures an Attacher.
type AttacherOptions struct {
	// Drivers are the CSI driver names handled: VolumeAttachments whose spec.attacher
	// is one of them.
	Drivers []string
	// AttachDelay is how long an attach takes, from the moment the simulator first
	// sees the VolumeAttachment.
	AttachDelay time.Duration
	// DetachDelay is how long a detach takes, from the moment the simulator first sees
	// the VolumeAttachment deleted.
	DetachDelay time.Duration
	// Attempt, if set, draws how long each attach or detach attempt takes and
	// whether it fails, in place of AttachDelay and DetachDelay; a failed attempt
	// is reported in status and tried again.
	Attempt func(detach bool) (took time.Duration, fail bool)
	// Workers is the number of VolumeAttachments handled in parallel; 4 by default.
	Workers int
}

// Attacher stands in for the CSI external-attacher: it puts its finalizer on the
// VolumeAttachments of its drivers, marks them attached, and on deletion marks them
// detached and lets them go.
type Attacher struct {
	client  kubernetes.Interface
	opts    AttacherOptions
	vas     cache.Indexer
	pvs     corelisters.PersistentVolumeLister
	queue   workqueue.TypedRateLimitingInterface[string]
	drivers map[string]bool

	mu sync.Mutex
	// failures are the attach errors asked for by volume handle (FailAttach).
	failures map[string]string
	// pending are the attaches and detaches under way.
	pending map[operation]attempt
	// written is each VolumeAttachment as the simulator's last patch left it: an
	// older copy of the same object in the cache is stale and not acted on.
	written map[string]writtenVersion
}

// writtenVersion is an object's UID and the resourceVersion a write left it at. A
// new object of the same name is another UID: what was written to the old one says
// nothing of it.
type writtenVersion struct {
	uid             types.UID
	resourceVersion uint64
}

// operation is an attach or a detach of one VolumeAttachment.
type operation struct {
	uid    types.UID
	detach bool
}

// attempt is one try of an operation: when it ends, and whether it fails then.
type attempt struct {
	ends time.Time
	fail bool
}

// StartAttacher starts simulating the external-attacher of opts.Drivers; it runs until
// ctx is cancelled. It returns once its caches are synced.
func StartAttacher(ctx context.Context, cfg *rest.Config, opts AttacherOptions) (*Attacher, error) {
	return start(ctx, cfg, "sim-attacher", opts, StartAttacherOn)
}

// StartAttacherOn is StartAttacher on a client of the caller's.
func StartAttacherOn(ctx context.Context, client kubernetes.Interface, opts AttacherOptions) (*Attacher, error) {
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	a := &Attacher{
		client: client, opts: opts, queue: newQueue(), drivers: map[string]bool{},
		failures: map[string]string{}, pending: map[operation]attempt{}, written: map[string]writtenVersion{},
	}
	for _, d := range opts.Drivers {
		a.drivers[d] = true
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	vaInformer := factory.Storage().V1().VolumeAttachments().Informer()
	if err := vaInformer.AddIndexers(cache.Indexers{attachmentsByPV: func(obj any) ([]string, error) {
		if va, ok := obj.(*storagev1.VolumeAttachment); ok && va.Spec.Source.PersistentVolumeName != nil {
			return []string{*va.Spec.Source.PersistentVolumeName}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, fmt.Errorf("adding volume attachment indexer: %w", err)
	}
	a.vas = vaInformer.GetIndexer()
	a.pvs = factory.Core().V1().PersistentVolumes().Lister()
	if _, err := vaInformer.AddEventHandler(enqueueHandler(a.queue, func(obj any) []string {
		if va, ok := obj.(*storagev1.VolumeAttachment); ok && a.drivers[va.Spec.Attacher] {
			return []string{va.Name}
		}
		return nil
	})); err != nil {
		return nil, fmt.Errorf("adding volume attachment event handler: %w", err)
	}
	if _, err := factory.Core().V1().PersistentVolumes().Informer().AddEventHandler(enqueueHandler(a.queue, func(obj any) []string {
		if pv, ok := obj.(*corev1.PersistentVolume); ok {
			return lookUp(a.vas, attachmentsByPV, pv.Name, func(va *storagev1.VolumeAttachment) string { return va.Name })
		}
		return nil
	})); err != nil {
		return nil, fmt.Errorf("adding persistent volume event handler: %w", err)
	}
	if err := startInformers(ctx, factory, "attacher simulator"); err != nil {
		return nil, err
	}
	runWorkers(ctx, "sim-attacher", opts.Workers, a.queue, a.sync)
	return a, nil
}

// FailAttach makes attaching the volume with this handle fail with message in
// status.attachError, until ClearFailures.
func (a *Attacher) FailAttach(handle, message string) {
	a.mu.Lock()
	a.failures[handle] = message
	a.mu.Unlock()
	a.enqueueHandle(handle)
}

// ClearFailures lets attaches of the volume with this handle succeed.
func (a *Attacher) ClearFailures(handle string) {
	a.mu.Lock()
	delete(a.failures, handle)
	a.mu.Unlock()
	a.enqueueHandle(handle)
}

func (a *Attacher) enqueueHandle(handle string) {
	for _, obj := range a.vas.List() {
		va := obj.(*storagev1.VolumeAttachment)
		if h, ok := a.handle(va); ok && h == handle && a.drivers[va.Spec.Attacher] {
			a.queue.Add(va.Name)
		}
	}
}

// handle returns the CSI volume handle a VolumeAttachment is for; ok is false
// while its PersistentVolume is not known.
func (a *Attacher) handle(va *storagev1.VolumeAttachment) (handle string, ok bool) {
	if spec := va.Spec.Source.InlineVolumeSpec; spec != nil {
		if spec.CSI == nil {
			return "", false
		}
		return spec.CSI.VolumeHandle, true
	}
	if va.Spec.Source.PersistentVolumeName == nil {
		return "", false
	}
	pv, err := a.pvs.Get(*va.Spec.Source.PersistentVolumeName)
	if err != nil {
		return "", false
	}
	src := CSISource(pv)
	if src == nil {
		return "", false
	}
	return src.VolumeHandle, true
}

// sync moves one VolumeAttachment on; retry > 0 asks to look again after that long.
func (a *Attacher) sync(ctx context.Context, name string) (retry time.Duration, err error) {
	obj, exists, err := a.vas.GetByKey(name)
	if err != nil {
		return 0, err
	}
	a.mu.Lock()
	written := a.written[name]
	if !exists {
		delete(a.written, name)
	}
	a.mu.Unlock()
	if !exists {
		return 0, nil
	}
	va := obj.(*storagev1.VolumeAttachment)
	if !a.drivers[va.Spec.Attacher] || (va.UID == written.uid && resourceVersion(va) < written.resourceVersion) {
		return 0, nil
	}
	finalizer := AttacherFinalizer(va.Spec.Attacher)
	if va.DeletionTimestamp != nil {
		if !slices.Contains(va.Finalizers, finalizer) {
			return 0, nil
		}
		return a.detach(ctx, va, finalizer)
	}
	if !slices.Contains(va.Finalizers, finalizer) {
		// The finalizer goes on first, so a deletion can never skip the detach.
		return 0, a.patchFinalizers(ctx, va, append(slices.Clone(va.Finalizers), finalizer))
	}
	return a.attach(ctx, va)
}

func (a *Attacher) attach(ctx context.Context, va *storagev1.VolumeAttachment) (time.Duration, error) {
	handle, ok := a.handle(va)
	if !ok {
		return 100 * time.Millisecond, nil
	}
	a.mu.Lock()
	msg, fail := a.failures[handle]
	a.mu.Unlock()
	if fail {
		if va.Status.AttachError != nil && va.Status.AttachError.Message == msg && !va.Status.Attached {
			return 0, nil
		}
		return 0, a.reportError(ctx, va, false, msg)
	}
	if va.Status.Attached && va.Status.AttachError == nil {
		return 0, nil
	}
	op := operation{uid: va.UID}
	if left, done, err := a.await(ctx, va, op); !done {
		return left, err
	}
	status := map[string]any{"attached": true, "attachError": nil, "attachmentMetadata": map[string]string{"devicePath": "/dev/sim"}}
	if err := a.patch(ctx, va, "status", map[string]any{"status": status}); err != nil {
		return 0, err
	}
	a.forget(op)
	klog.FromContext(ctx).WithName("sim-attacher").V(2).Info("Attached", "volumeAttachment", va.Name, "node", va.Spec.NodeName)
	return 0, nil
}

func (a *Attacher) detach(ctx context.Context, va *storagev1.VolumeAttachment, finalizer string) (time.Duration, error) {
	op := operation{uid: va.UID, detach: true}
	if left, done, err := a.await(ctx, va, op); !done {
		return left, err
	}
	if va.Status.Attached || va.Status.DetachError != nil {
		if err := a.patch(ctx, va, "status", map[string]any{"status": map[string]any{"attached": false, "detachError": nil}}); err != nil {
			return 0, err
		}
	}
	if err := a.patchFinalizers(ctx, va, slices.DeleteFunc(slices.Clone(va.Finalizers), func(f string) bool { return f == finalizer })); err != nil {
		return 0, err
	}
	a.mu.Lock()
	// The object goes: no copy of it left in the cache is acted on.
	a.written[va.Name] = writtenVersion{uid: va.UID, resourceVersion: math.MaxUint64}
	delete(a.pending, op)
	delete(a.pending, operation{uid: va.UID})
	a.mu.Unlock()
	klog.FromContext(ctx).WithName("sim-attacher").V(2).Info("Detached", "volumeAttachment", va.Name, "node", va.Spec.NodeName)
	return 0, nil
}

// simulatedFailure is the error of a failed attempt, by whether it detached.
var simulatedFailure = map[bool]string{
	false: "rpc error: code = Unavailable desc = simulated ControllerPublishVolume failure",
	true:  "rpc error: code = Unavailable desc = simulated ControllerUnpublishVolume failure",
}

// await follows the current attempt of an operation: done once it succeeded;
// while it lasts, how long it has left; once it failed, it reports the failure
// and returns how long the next attempt takes.
func (a *Attacher) await(ctx context.Context, va *storagev1.VolumeAttachment, op operation) (left time.Duration, done bool, err error) {
	try, left := a.try(op)
	switch {
	case left > 0:
		return left, false, nil
	case !try.fail:
		return 0, true, nil
	}
	if err := a.reportError(ctx, va, op.detach, simulatedFailure[op.detach]); err != nil {
		return 0, false, err
	}
	a.forget(op)
	_, left = a.try(op)
	return max(left, time.Nanosecond), false, nil
}

// reportError writes the error of an attach or a detach to the VolumeAttachment's
// status; a failed attach also marks it not attached.
func (a *Attacher) reportError(ctx context.Context, va *storagev1.VolumeAttachment, detach bool, msg string) error {
	verr := storagev1.VolumeError{Time: metav1.Now(), Message: msg}
	status := map[string]any{"attached": false, "attachError": verr}
	if detach {
		status = map[string]any{"detachError": verr}
	}
	if err := a.patch(ctx, va, "status", map[string]any{"status": status}); err != nil {
		return err
	}
	klog.FromContext(ctx).WithName("sim-attacher").V(2).Info("Reported an error", "volumeAttachment", va.Name, "node", va.Spec.NodeName, "detach", detach, "error", msg)
	return nil
}

// try returns the current attempt of an operation, starting one on the first
// call, and how long it has left.
func (a *Attacher) try(op operation) (attempt, time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	try, ok := a.pending[op]
	if !ok {
		took, fail := a.opts.AttachDelay, false
		switch {
		case a.opts.Attempt != nil:
			took, fail = a.opts.Attempt(op.detach)
		case op.detach:
			took = a.opts.DetachDelay
		}
		try = attempt{ends: time.Now().Add(took), fail: fail}
		a.pending[op] = try
	}
	return try, time.Until(try.ends)
}

func (a *Attacher) forget(op operation) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.pending, op)
}

// patchFinalizers replaces the finalizers of the VolumeAttachment as the simulator
// last saw it; a conflict means someone changed it meanwhile.
func (a *Attacher) patchFinalizers(ctx context.Context, va *storagev1.VolumeAttachment, finalizers []string) error {
	if finalizers == nil {
		finalizers = []string{}
	}
	return a.patch(ctx, va, "finalizers", map[string]any{"metadata": map[string]any{"finalizers": finalizers, "resourceVersion": va.ResourceVersion}})
}

// patch applies a merge patch to the VolumeAttachment, or to its status when what
// is "status".
func (a *Attacher) patch(ctx context.Context, va *storagev1.VolumeAttachment, what string, body map[string]any) error {
	patch, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encoding %s of volume attachment %s: %w", what, va.Name, err)
	}
	var subresources []string
	if what == "status" {
		subresources = []string{"status"}
	}
	updated, err := a.client.StorageV1().VolumeAttachments().Patch(ctx, va.Name, types.MergePatchType, patch, metav1.PatchOptions{}, subresources...)
	if err != nil {
		return fmt.Errorf("patching %s of volume attachment %s: %w", what, va.Name, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.written[va.Name] = writtenVersion{uid: updated.UID, resourceVersion: resourceVersion(updated)}
	return nil
}
