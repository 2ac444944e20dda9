// Package operationexecutor runs attach and detach operations: at most one at a
// time per single-attach volume across the cluster, one per volume and node for the
// others, with exponential backoff per kind of operation after a failure. Attaching
// creates the VolumeAttachment and waits, through the informer, for the CSI
// external-attacher to mark it attached; detaching takes the volume out of node
// status, confirms that with the API server, and deletes the VolumeAttachment.
//
// In-tree iSCSI and Fibre Channel volumes have no VolumeAttachment: kubelet
// attaches them itself once node status lists them, so attaching them only records
// them for node status and detaching them only takes them out of it, under the
// same rules as any other volume.
//
// A write whose outcome is unknown (an error other than one the API server gives
// for a request it refused) is neither success nor failure: an object the
// controller tried to create counts as existing until the informer shows it or a
// later write answers for it, and a delete of unknown outcome is settled with a
// read before anything else happens to the volume: the detach reads the object
// back, and if that fails too, a retry of its own reads it again with backoff
// until the API server answers, whether or not the periodic pass runs. The same
// retry reads back a deleted object the informer never showed, until the API
// server no longer has it: no informer event will tell of its end.
package operationexecutor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/interleave"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/podevents"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/writegate"
)

// NodeStatus writes a node's status.volumesAttached from the actual state.
type NodeStatus interface {
	// Confirm makes the API server's list match the actual state as it stands
	// now and returns the node as the API server returned it (nil if the node
	// does not exist; unwritten if the controller does not manage it).
	Confirm(ctx context.Context, node string) (*v1.Node, error)
	// Enqueue asks for the node's list to be written soon.
	Enqueue(node string)
}

// Config holds what the executor needs.
type Config struct {
	Client   kubernetes.Interface
	VALister storagelisters.VolumeAttachmentLister
	Actual   *cache.ActualState
	// Nodes is the node register: what the informer last showed of each node,
	// deleted ones included.
	Nodes      *cache.Nodes
	NodeStatus NodeStatus
	Events     *podevents.Emitter
	Metrics    *metrics.Metrics
	// Timeout bounds the wait for the external-attacher in one operation.
	Timeout time.Duration
	// Wanted tells whether a pod on the node needs the volume now; a detach is
	// called off at the last moment if one does.
	Wanted Wanted
	// Pods reads the node's pods from the API server: asked before a forced
	// detach, which an informer that has not shown a pod just scheduled there
	// must not decide alone.
	Pods PodChecker
	// Done is given the volume when one of its operations ends, so that the
	// volume is reconciled again.
	Done VolumeQueue
}

// Wanted tells whether a pod on the node needs the volume now, as the informers
// show the pods (cache.DesiredState).
type Wanted interface {
	IsDesired(volume volumename.UniqueName, node string) bool
}

// PodChecker reads the node's pods from the API server and tells whether one
// needs the volume (populator.PodChecker).
type PodChecker interface {
	NeededOnNode(ctx context.Context, volume volumename.UniqueName, node string) (bool, error)
}

// VolumeQueue takes the volumes to reconcile again (the reconciler's queue).
type VolumeQueue interface {
	Enqueue(volume volumename.UniqueName)
}

// HeldError means a single-attach volume cannot be attached because other nodes
// hold it.
type HeldError struct {
	Nodes []string
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("the volume is held by node(s) %v", e.Nodes)
}

// HoldersUnknownError means a single-attach volume cannot be attached because
// the actual state may lack a VolumeAttachment that holds it elsewhere.
type HoldersUnknownError struct {
	Reason string
}

func (e *HoldersUnknownError) Error() string {
	return "whether another node holds the volume is not known: " + e.Reason
}

var (
	// ErrInUse means a detach was called off because the node reported the volume
	// in use, and no force rule applied when the API server was asked.
	ErrInUse = errors.New("the node reports the volume in use; not detaching")
	// ErrWanted means a detach was called off because a pod on the node needs the
	// volume again.
	ErrWanted = errors.New("a pod on the node needs the volume again; not detaching")
	// ErrNotManaged means a detach was called off because the node the API
	// server returned is not managed by the attach/detach controller: kubelet
	// attaches and detaches there itself.
	ErrNotManaged = errors.New("the node is not managed by the attach/detach controller; not detaching")
)

// ErrStopped means the executor is stopping: no operation starts any more.
var ErrStopped = errors.New("the controller is stopping")

// Executor starts operations in their own goroutines.
type Executor struct {
	cfg    Config
	locks  *locks
	waiter *waiter

	mu       sync.Mutex
	stopping bool
	// settling holds the objects whose delete of unknown outcome a retry is
	// reading back.
	settling map[string]bool
	running  sync.WaitGroup
}

// New returns an Executor.
func New(cfg Config) *Executor {
	return &Executor{cfg: cfg, locks: newLocks(time.Now), waiter: newWaiter(), settling: make(map[string]bool)}
}

// ObserveVolumeAttachment passes what the informer saw of a VolumeAttachment (nil
// once deleted) to the operations waiting for it.
func (e *Executor) ObserveVolumeAttachment(name string, va *storagev1.VolumeAttachment) {
	e.waiter.observe(name, va)
}

// WaitsFor tells whether a running operation waits for what the informer shows
// of the VolumeAttachment. That operation ends after it, and Done then has the
// volume reconciled: what the informer shows of the object meanwhile needs no
// reconcile of its own.
func (e *Executor) WaitsFor(name string) bool { return e.waiter.waitsFor(name) }

// IsRunning tells whether an operation that involves the volume on the node runs.
func (e *Executor) IsRunning(volume volumename.UniqueName, node string) bool {
	return e.locks.isRunning(volume, node)
}

// Backoff tells, for an explanation, how long the next attach or detach of the
// volume on the node must wait after a failure, and which ("attach" or
// "detach"); zero when none must.
func (e *Executor) Backoff(volume volumename.UniqueName, node string) (time.Duration, string) {
	left, k := e.locks.backoffLeft(volume, node)
	if left == 0 {
		return 0, ""
	}
	if k == attachKind {
		return left, "attach"
	}
	return left, "detach"
}

// ResetBackoff lets the next operation on the volume and node start at once, for
// instance when the node's CSI driver has just registered. It reports whether the
// pair was backing off after a failed attach.
func (e *Executor) ResetBackoff(volume volumename.UniqueName, node string) bool {
	return e.locks.resetBackoff(volume, node)
}

// ForgetExpired drops what is remembered of failures long past.
func (e *Executor) ForgetExpired() { e.locks.forgetExpired() }

// Wait stops new operations from starting and waits until every running one has
// ended, or ctx ends.
func (e *Executor) Wait(ctx context.Context) error {
	e.mu.Lock()
	e.stopping = true
	e.mu.Unlock()
	done := make(chan struct{})
	go func() {
		e.running.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("operations still running: %w", ctx.Err())
	}
}

// AttachObserved reports the attach of the volume to the node as a success if
// the last attach operation for the pair had failed: the external-attacher kept
// trying after the operation gave up, and the pods deserve to know it worked.
func (e *Executor) AttachObserved(vol cache.Volume, node string, pods []cache.PodRef) {
	if e.locks.isRunning(vol.Name, node) || !e.locks.resetBackoff(vol.Name, node) {
		return
	}
	e.cfg.Events.Emit(pods, v1.EventTypeNormal, podevents.ReasonSuccessfulAttach, podevents.AttachSucceeded(vol.DisplayName))
}

// begin takes key for an operation of kind k, unless the executor is stopping,
// ctx has ended, a conflicting operation runs or the pair is backing off.
func (e *Executor) begin(ctx context.Context, key lockKey, node string, k kind) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopping || ctx.Err() != nil {
		return ErrStopped
	}
	if err := e.locks.acquire(key, node, k); err != nil {
		return err
	}
	e.running.Add(1)
	return nil
}

// abandon gives key back for an operation that begin allowed but that does not
// start after all.
func (e *Executor) abandon(key lockKey) {
	e.locks.free(key)
	e.running.Done()
}

// start runs op in its own goroutine under key, taken by begin, and reports its
// end.
func (e *Executor) start(key lockKey, node string, k kind, op func() error) {
	go func() {
		defer e.running.Done()
		err := op()
		e.locks.release(key, node, k, err != nil)
		e.cfg.Done.Enqueue(key.volume)
	}()
}

// Attach starts attaching the volume to the node for the pods. For a single-attach
// volume it checks, holding the volume's lock, that no other node holds it. It
// returns ErrPending, a *BackoffError, a *HoldersUnknownError or a *HeldError
// when the operation cannot start now.
func (e *Executor) Attach(ctx context.Context, vol cache.Volume, node string, pods []cache.PodRef) error {
	key := lockFor(vol.Name, node, vol.MultiAttach)
	if err := e.begin(ctx, key, node, attachKind); err != nil {
		return err
	}
	if !vol.MultiAttach {
		if why := e.cfg.Actual.Incomplete(); why != "" && !volumename.ReportOnly(vol.Name) {
			e.abandon(key)
			return &HoldersUnknownError{Reason: why}
		}
		if holders := e.cfg.Actual.Holders(vol.Name, vol.PVName, node); len(holders) > 0 {
			e.abandon(key)
			return &HeldError{Nodes: holders}
		}
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "operation", "attach", "volume", vol.Name, "node", node)
	if volumename.ReportOnly(vol.Name) {
		e.attachReportOnly(logger, key, vol, node, pods)
		return nil
	}
	e.start(key, node, attachKind, func() error {
		started := time.Now()
		err := e.attach(klog.NewContext(ctx, logger), vol, node)
		e.cfg.Metrics.ObserveOperation(metrics.Op{Kind: metrics.OperationAttach, Plugin: volumename.PluginLabel(vol.Name), Migrated: vol.Migrated, Started: started, Err: err})
		switch {
		case err == nil:
			logger.V(2).Info("Volume attached", "duration", time.Since(started))
			e.cfg.Events.Emit(pods, v1.EventTypeNormal, podevents.ReasonSuccessfulAttach, podevents.AttachSucceeded(vol.DisplayName))
		case ctx.Err() != nil:
			logger.V(2).Info("Attach interrupted by shutdown")
		default:
			logger.Error(err, "Attach failed")
			e.cfg.Events.Emit(pods, v1.EventTypeWarning, podevents.ReasonFailedAttach, podevents.AttachFailed(vol.DisplayName, err))
		}
		return err
	})
	return nil
}

// attachReportOnly attaches an in-tree iSCSI or Fibre Channel volume the way
// kube-controller-manager does: there is nothing to call, kubelet attaches it
// once node status lists it, so the attachment is recorded and node status is
// written soon after.
func (e *Executor) attachReportOnly(logger klog.Logger, key lockKey, vol cache.Volume, node string, pods []cache.PodRef) {
	started := time.Now()
	if e.cfg.Actual.AddReportOnly(vol.Name, node, vol.MultiAttach) {
		e.cfg.NodeStatus.Enqueue(node)
	}
	e.abandon(key)
	e.cfg.Metrics.ObserveOperation(metrics.Op{Kind: metrics.OperationAttach, Plugin: volumename.PluginLabel(vol.Name), Started: started})
	logger.V(2).Info("Volume attached; node status will list it for kubelet to attach")
	e.cfg.Events.Emit(pods, v1.EventTypeNormal, podevents.ReasonSuccessfulAttach, podevents.AttachSucceeded(vol.DisplayName))
}

func (e *Executor) attach(ctx context.Context, vol cache.Volume, node string) error {
	name := volumename.AttachmentName(vol.Handle, vol.Driver, node)
	// An object recorded but never seen is one an earlier create may or may not
	// have made: creating it again settles that.
	if att, recorded := e.cfg.Actual.Object(name); !recorded || !att.Seen {
		interleave.At(ctx, "attach-create", name)
		fresh := e.cfg.Actual.BeginCreate(vol.Name, node, name, vol.MultiAttach)
		if err := e.create(ctx, vol, node, name, fresh); err != nil {
			// A create of unknown outcome leaves a record that may name no
			// object; the node holds the volume until a read settles that.
			if att, ok := e.cfg.Actual.Object(name); ok && !att.Seen {
				e.retrySettle(ctx, att)
			}
			return err
		}
	}
	waitCtx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	// The informer may not have seen the object just created: nil means "not yet"
	// until it has been seen, and "deleted" after. Before it has been seen, an
	// object of another UID than the create's answer is an older one the informer
	// still shows.
	own, _ := e.cfg.Actual.Object(name)
	seen := false
	err := e.waiter.wait(waitCtx, name, e.current(name), func(va *storagev1.VolumeAttachment) (bool, error) {
		switch {
		case (va == nil || own.UID != "" && va.UID != own.UID) && !seen:
			return false, nil
		case va == nil || own.UID != "" && va.UID != own.UID:
			return true, fmt.Errorf("VolumeAttachment %s was deleted before it was attached", name)
		case va.DeletionTimestamp != nil:
			return true, fmt.Errorf("VolumeAttachment %s is being deleted", name)
		}
		seen = true
		switch {
		case va.Status.Attached:
			return true, nil
		case va.Status.AttachError != nil:
			return true, errors.New(va.Status.AttachError.Message)
		}
		return false, nil
	})
	if err != nil && !seen {
		if _, readErr := e.settleUnseen(ctx, name); readErr != nil {
			e.retrySettle(ctx, own)
		}
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return fmt.Errorf("timed out after %s waiting for the external-attacher of %s to attach VolumeAttachment %s", e.cfg.Timeout, vol.Driver, name)
	}
	return err
}

// create sends the VolumeAttachment. On an error whose outcome is unknown the
// object stays recorded: it may exist. A refused create forgets the record only
// if this create made it (fresh) and nothing has been learned of the object since.
func (e *Executor) create(ctx context.Context, vol cache.Volume, node, name string, fresh bool) error {
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: vol.Driver,
			NodeName: node,
		},
	}
	if vol.InlineSpec != nil {
		va.Spec.Source.InlineVolumeSpec = vol.InlineSpec.DeepCopy()
	} else {
		pv := vol.PVName
		va.Spec.Source.PersistentVolumeName = &pv
	}
	wctx, cancel, err := writegate.Open(ctx)
	if err != nil {
		e.forgetUnmade(name, fresh)
		return fmt.Errorf("not creating VolumeAttachment %s: %w", name, err)
	}
	defer cancel()
	created, err := e.cfg.Client.StorageV1().VolumeAttachments().Create(wctx, va, metav1.CreateOptions{})
	switch {
	case err == nil:
		klog.FromContext(ctx).V(4).Info("Created VolumeAttachment", "volumeAttachment", name)
		e.cfg.Actual.Created(name, created.UID)
		return nil
	case apierrors.IsAlreadyExists(err):
		return nil
	case refused(err):
		e.forgetUnmade(name, fresh)
	}
	return fmt.Errorf("creating VolumeAttachment %s: %w", name, err)
}

// forgetUnmade forgets the record of a create that certainly made nothing (it
// was refused, or never sent), if this create made the record (fresh) and nothing
// has been learned of the object since.
func (e *Executor) forgetUnmade(name string, fresh bool) {
	if att, ok := e.cfg.Actual.Object(name); fresh && ok && !att.Seen && att.UID == "" {
		e.cfg.Actual.Forget(name, "")
	}
}

// refused tells whether the API server answered the request by refusing it, so
// that it certainly changed nothing.
func refused(err error) bool {
	return apierrors.IsTooManyRequests(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) ||
		apierrors.IsUnauthorized(err) || apierrors.IsMethodNotSupported(err) || apierrors.IsNotAcceptable(err) ||
		apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsUnsupportedMediaType(err)
}

// Settle reads, unless an operation on it runs, an object whose existence or
// deletion only the API server can settle: one the controller created, or tried
// to, that the informer never showed (if the API server does not have it, the
// record goes), or one whose delete had an unknown outcome.
func (e *Executor) Settle(ctx context.Context, att cache.Attachment) {
	if !att.DeleteUnsettled {
		if err := e.settleCreate(ctx, att); err != nil && !errors.Is(err, errBusy) {
			klog.FromContext(ctx).Error(err, "Reading a VolumeAttachment the informer never showed, to learn whether it exists", "volumeAttachment", att.VolumeAttachment)
		}
		return
	}
	if err := e.settleDelete(ctx, att, e.readDeleted); err != nil && !errors.Is(err, errBusy) {
		klog.FromContext(ctx).Error(err, "Reading a VolumeAttachment to learn whether its delete took effect", "volumeAttachment", att.VolumeAttachment)
	}
}

// errBusy means an operation on the volume runs: it is the one to settle what
// it finds.
var errBusy = errors.New("an operation on the volume runs")

// settleDelete reads back, with read and unless an operation on it runs, an
// object whose delete had an unknown outcome, or that the informer never showed
// and whose delete took effect, records what it learns and has the volume
// reconciled again.
func (e *Executor) settleDelete(ctx context.Context, att cache.Attachment, read func(context.Context, cache.Attachment) (readOutcome, error)) error {
	key := lockFor(att.Volume, att.Node, att.MultiAttach)
	if !e.locks.tryAcquire(key) {
		return errBusy
	}
	defer e.locks.free(key)
	outcome, err := read(ctx, att)
	if err != nil {
		return err
	}
	if outcome != objectUntouched {
		e.recordDeleted(ctx, att, outcome)
	}
	e.cfg.Actual.SetDeleteUnsettled(att.VolumeAttachment, att.UID, false)
	e.cfg.Done.Enqueue(att.Volume)
	return nil
}

// recordDeleted records that the delete of the object took effect. The informer
// tells when an object it has shown is gone; of one it never showed (the
// controller's create got no answer, and the informer has not listed since) it
// may never tell, as it never held it. Such an object is forgotten once the API
// server no longer has it, and until then a retry of its own reads it back.
func (e *Executor) recordDeleted(ctx context.Context, att cache.Attachment, outcome readOutcome) {
	if outcome == objectGone && e.forgetIfUnseen(att) {
		return
	}
	e.cfg.Actual.MarkDeleting(att.VolumeAttachment, att.UID)
	if cur, ok := e.cfg.Actual.Object(att.VolumeAttachment); ok && unsettled(cur) {
		e.retrySettle(ctx, cur)
	}
}

// unsettled tells whether only a read from the API server can settle what
// became of the object: its delete had an unknown outcome, or it took effect on
// an object the informer never showed.
func unsettled(att cache.Attachment) bool {
	return att.DeleteUnsettled || (att.Deleting && !att.Seen)
}

// retrySettle reads back, in its own goroutine, an object that only a read can
// settle, again and again with backoff, until ctx ends or what became of it is
// known: a create of unknown outcome is settled once a read finds the object, or
// finds it missing and the record goes; a delete of unknown outcome, or one that
// took effect on an object the informer never showed, as settleDelete tells.
// Nothing else may be waiting to settle it: the reconciler leaves a volume alone
// while its delete may be under way, no attach follows a create whose node no
// longer needs the volume, and the periodic pass may be off.
func (e *Executor) retrySettle(ctx context.Context, att cache.Attachment) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopping || ctx.Err() != nil || e.settling[att.VolumeAttachment] {
		return
	}
	e.settling[att.VolumeAttachment] = true
	e.running.Add(1)
	go func() {
		defer e.running.Done()
		defer func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			delete(e.settling, att.VolumeAttachment)
		}()
		logger := klog.FromContext(ctx).WithValues("volumeAttachment", att.VolumeAttachment)
		delay := initialBackoff
		for {
			retry := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				retry.Stop()
				return
			case <-retry.C:
			}
			cur, ok := e.cfg.Actual.Object(att.VolumeAttachment)
			if !ok || !cur.Unknown() || (att.UID != "" && cur.UID != att.UID) {
				return
			}
			delay = min(2*delay, maxBackoff)
			if !cur.Deleting && !cur.DeleteUnsettled {
				if err := e.settleCreate(ctx, cur); err != nil {
					logger.V(2).Info("The outcome of a create is still unknown, reading the VolumeAttachment again later", "err", err, "after", delay)
					continue
				}
				logger.V(2).Info("Settled a create by reading the VolumeAttachment back")
				return
			}
			if err := e.settleDelete(ctx, cur, e.readBack); err != nil {
				logger.V(2).Info("The outcome of a delete is still unknown, reading the VolumeAttachment again later", "err", err, "after", delay)
				continue
			}
			if cur, ok := e.cfg.Actual.Object(att.VolumeAttachment); !ok || !unsettled(cur) {
				logger.V(2).Info("Settled a delete by reading the VolumeAttachment back")
				return
			}
			logger.V(2).Info("A deleted VolumeAttachment the informer never showed is still there, reading it again later", "after", delay)
		}
	}()
}

// settleCreate reads, unless an operation on it runs, an object the informer
// never showed and the controller tried to create. If the record goes, the
// volume is reconciled again: no operation's end will do it.
func (e *Executor) settleCreate(ctx context.Context, att cache.Attachment) error {
	key := lockFor(att.Volume, att.Node, att.MultiAttach)
	if !e.locks.tryAcquire(key) {
		return errBusy
	}
	defer e.locks.free(key)
	forgotten, err := e.settleUnseen(ctx, att.VolumeAttachment)
	if forgotten {
		e.cfg.Done.Enqueue(att.Volume)
	}
	return err
}

// settleUnseen reads an object the informer never showed: if the API server does
// not have it, the record of it goes.
func (e *Executor) settleUnseen(ctx context.Context, name string) (forgotten bool, err error) {
	att, ok := e.cfg.Actual.Object(name)
	if !ok || att.Seen {
		return false, nil
	}
	_, err = e.cfg.Client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return e.forgetIfUnseen(att), nil
	case err != nil:
		return false, fmt.Errorf("reading VolumeAttachment %s: %w", name, err)
	}
	return false, nil
}

// Detach starts detaching the volume from the node: deleting every
// VolumeAttachment of the pair. Unless force names a rule that still holds when
// the API server is asked, the detach is called off if the node reports the volume
// in use once it no longer lists it as attached. It returns ErrPending or a
// *BackoffError when the operation cannot start now.
func (e *Executor) Detach(ctx context.Context, on cache.OnNode, force cache.ForceRule) error {
	key := lockFor(on.Volume, on.Node, on.MultiAttach())
	if err := e.begin(ctx, key, on.Node, detachKind); err != nil {
		return err
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "operation", "detach", "volume", on.Volume, "node", on.Node)
	e.start(key, on.Node, detachKind, func() error {
		started := time.Now()
		err := e.detach(klog.NewContext(ctx, logger), on, force)
		e.cfg.Metrics.ObserveOperation(metrics.Op{Kind: metrics.OperationDetach, Plugin: volumename.PluginLabel(on.Volume), Migrated: on.Migrated(), Started: started, Err: err})
		switch {
		case err == nil:
			logger.V(2).Info("Volume detached", "duration", time.Since(started))
		case ctx.Err() != nil:
			logger.V(2).Info("Detach interrupted by shutdown")
		case errors.Is(err, ErrInUse), errors.Is(err, ErrWanted), errors.Is(err, ErrNotManaged):
			logger.Info("Detach called off", "reason", err)
		default:
			logger.Error(err, "Detach failed")
		}
		return err
	})
	return nil
}

func (e *Executor) detach(ctx context.Context, on cache.OnNode, force cache.ForceRule) (err error) {
	if force == cache.ForcedOnTimeout && volumename.ReportOnly(on.Volume) {
		// An iSCSI or FC volume is detached by the status write that takes it
		// out. A pod of the node that needs it calls the detach off here; the
		// write reads the pods again right before it goes out, maybe much later.
		if err := e.checkPods(ctx, on); err != nil {
			return err
		}
	}
	e.cfg.Actual.HideForDetach(on.Volume, on.Node, force)
	keepHidden := false
	defer func() {
		if err != nil && !keepHidden && e.cfg.Actual.SetHiddenFromNodeStatus(on.Volume, on.Node, false) {
			e.cfg.NodeStatus.Enqueue(on.Node)
		}
	}()
	node, err := e.cfg.NodeStatus.Confirm(ctx, on.Node)
	if err != nil {
		return fmt.Errorf("removing the volume from the status of node %s before detaching: %w", on.Node, err)
	}
	forced, err := e.mayDetach(ctx, on, force, node)
	if err != nil {
		return err
	}
	if forced {
		klog.FromContext(ctx).Info("Force-detaching a volume the node may still have mounted", "reason", force)
		e.cfg.Metrics.ObserveForcedDetach(force)
	}
	if e.cfg.Wanted.IsDesired(on.Volume, on.Node) {
		return ErrWanted
	}
	// Nothing is detached while the node the API server returned still lists the
	// volume: kubelet could mount it. For an in-tree iSCSI or FC volume, node
	// status is the record, and the detach is over once it no longer does.
	if node != nil && slices.ContainsFunc(node.Status.VolumesAttached, func(av v1.AttachedVolume) bool { return av.Name == v1.UniqueVolumeName(on.Volume) }) {
		return fmt.Errorf("the status of node %s still lists the volume; not detaching yet", on.Node)
	}
	for _, att := range on.Objects {
		if att.ReportOnly() {
			e.cfg.Actual.ForgetReportOnly(on.Volume, on.Node)
			continue
		}
		if att.Deleting {
			continue
		}
		interleave.At(ctx, "detach-delete", att.VolumeAttachment)
		if forced {
			if err := e.stillForced(ctx, on, force); err != nil {
				return err
			}
		}
		settled, err := e.delete(ctx, att)
		if !settled {
			keepHidden = true
		}
		if err != nil {
			return err
		}
	}
	waitCtx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	for _, att := range on.Objects {
		if att.ReportOnly() {
			continue
		}
		if err := e.waitGone(waitCtx, att); err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				return fmt.Errorf("timed out after %s waiting for VolumeAttachment %s to be deleted", e.cfg.Timeout, att.VolumeAttachment)
			}
			return err
		}
	}
	return nil
}

// mayDetach tells whether the volume may go from the node as the API server
// returned it once the volume left its volumesAttached (nil: the node is gone),
// and whether only the force rule lets it: kubelet reports a volume in use before
// it mounts it, and mounts only a volume node status lists as attached, so that
// node is the last word.
func (e *Executor) mayDetach(ctx context.Context, on cache.OnNode, force cache.ForceRule, node *v1.Node) (forced bool, err error) {
	switch {
	case node == nil:
		// The node is gone from the API server: its last report is all there is,
		// and only once the register has it (the informer delivered the deletion,
		// or the periodic pass noticed it) does it speak for the node.
		last := e.cfg.Nodes.Get(on.Node)
		if last.Presence == cache.NodeDeleted && !last.Mounted(on.Volume) {
			return false, nil
		}
		if !force.HoldsAfterDeletion(last) {
			return false, ErrInUse
		}
	case !cache.IsManaged(node):
		// The annotation was taken away since the decision: the reconciler
		// leaves such a node to kubelet, and so does the detach.
		return false, ErrNotManaged
	case !slices.Contains(node.Status.VolumesInUse, v1.UniqueVolumeName(on.Volume)):
		return false, nil
	case !force.Holds(node):
		return false, ErrInUse
	}
	if force == cache.ForcedOnTimeout && !volumename.ReportOnly(on.Volume) {
		if err := e.checkPods(ctx, on); err != nil {
			return false, err
		}
	}
	return true, nil
}

// checkPods reads the node's pods from the API server before a detach forced by
// the end of the wait for unmount, which an informer that has not shown a pod
// just scheduled there must not decide alone.
func (e *Executor) checkPods(ctx context.Context, on cache.OnNode) error {
	needed, err := e.cfg.Pods.NeededOnNode(ctx, on.Volume, on.Node)
	if err != nil {
		return fmt.Errorf("reading the pods of node %s before a forced detach: %w", on.Node, err)
	}
	if needed {
		return ErrWanted
	}
	return nil
}

// stillForced reads the node again right before a forced detach deletes a
// VolumeAttachment, and tells whether the force rule still lets the volume go:
// the taint may have been removed, or the node come back, since the detach
// began, and it deletes the objects of the pair one after the other.
func (e *Executor) stillForced(ctx context.Context, on cache.OnNode, force cache.ForceRule) error {
	node, err := e.cfg.Client.CoreV1().Nodes().Get(ctx, on.Node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		node = nil
	case err != nil:
		return fmt.Errorf("reading node %s again before a forced delete: %w", on.Node, err)
	}
	_, err = e.mayDetach(ctx, on, force, node)
	return err
}

// delete deletes one VolumeAttachment. settled is false when the outcome could
// not be learned: the object may be on its way out.
func (e *Executor) delete(ctx context.Context, att cache.Attachment) (settled bool, err error) {
	opts := metav1.DeleteOptions{}
	if att.UID != "" {
		uid := att.UID
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	wctx, cancel, err := writegate.Open(ctx)
	if err != nil {
		return true, fmt.Errorf("not deleting VolumeAttachment %s: %w", att.VolumeAttachment, err)
	}
	defer cancel()
	err = e.cfg.Client.StorageV1().VolumeAttachments().Delete(wctx, att.VolumeAttachment, opts)
	switch {
	case err == nil:
		e.recordDeleted(ctx, att, objectDeleting)
		return true, nil
	case apierrors.IsNotFound(err):
		e.forgetIfUnseen(att)
		return true, nil
	case apierrors.IsConflict(err):
		return true, fmt.Errorf("VolumeAttachment %s was replaced by a newer one, not deleting it: %w", att.VolumeAttachment, err)
	case refused(err):
		return true, fmt.Errorf("deleting VolumeAttachment %s: %w", att.VolumeAttachment, err)
	}
	outcome, readErr := e.readDeleted(ctx, att)
	switch {
	case readErr != nil:
		e.cfg.Actual.SetDeleteUnsettled(att.VolumeAttachment, att.UID, true)
		e.retrySettle(ctx, att)
		return false, fmt.Errorf("deleting VolumeAttachment %s: %w; reading it back to learn the outcome: %w", att.VolumeAttachment, err, readErr)
	case outcome != objectUntouched:
		e.recordDeleted(ctx, att, outcome)
		return true, nil
	}
	return true, fmt.Errorf("deleting VolumeAttachment %s: %w", att.VolumeAttachment, err)
}

// readOutcome is what a read after a delete learned of the object.
type readOutcome int

const (
	// objectUntouched: the object is there, not being deleted.
	objectUntouched readOutcome = iota
	// objectDeleting: the object is being deleted, or was replaced by a newer
	// one of its name.
	objectDeleting
	// objectGone: the API server does not have the object.
	objectGone
)

// readDeleted reads the object back after a delete of unknown outcome, retrying
// until the API server answers or the operation's time is up, and tells what
// became of it.
func (e *Executor) readDeleted(ctx context.Context, att cache.Attachment) (readOutcome, error) {
	rctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 10, Cap: 10 * time.Second}
	var outcome readOutcome
	var lastErr error
	err := wait.ExponentialBackoffWithContext(rctx, backoff, func(ctx context.Context) (bool, error) {
		outcome, lastErr = e.readBack(ctx, att)
		return lastErr == nil, nil
	})
	if err != nil {
		return objectUntouched, errors.Join(err, lastErr)
	}
	return outcome, nil
}

// readBack reads the object once after a delete and tells what became of it.
func (e *Executor) readBack(ctx context.Context, att cache.Attachment) (readOutcome, error) {
	va, err := e.cfg.Client.StorageV1().VolumeAttachments().Get(ctx, att.VolumeAttachment, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return objectGone, nil
	case err != nil:
		return objectUntouched, fmt.Errorf("reading VolumeAttachment %s: %w", att.VolumeAttachment, err)
	case va.DeletionTimestamp != nil || (att.UID != "" && va.UID != att.UID):
		return objectDeleting, nil
	}
	return objectUntouched, nil
}

// forgetIfUnseen forgets the object if the informer never showed it, and
// reports whether it did.
func (e *Executor) forgetIfUnseen(att cache.Attachment) bool {
	cur, ok := e.cfg.Actual.Object(att.VolumeAttachment)
	if !ok || cur.Seen {
		return false
	}
	_, forgotten := e.cfg.Actual.Forget(att.VolumeAttachment, cur.UID)
	return forgotten
}

// waitGone waits until the informer no longer shows the object.
func (e *Executor) waitGone(ctx context.Context, att cache.Attachment) error {
	if cur, ok := e.cfg.Actual.Object(att.VolumeAttachment); !ok || !cur.Seen && e.current(att.VolumeAttachment)() == nil {
		return nil
	}
	return e.waiter.wait(ctx, att.VolumeAttachment, e.current(att.VolumeAttachment), func(va *storagev1.VolumeAttachment) (bool, error) {
		switch {
		case va == nil || (att.UID != "" && va.UID != att.UID):
			return true, nil
		case va.Status.DetachError != nil:
			return true, fmt.Errorf("the external-attacher failed to detach: %s", va.Status.DetachError.Message)
		}
		return false, nil
	})
}

func (e *Executor) current(name string) func() *storagev1.VolumeAttachment {
	return func() *storagev1.VolumeAttachment {
		va, err := e.cfg.VALister.Get(name)
		if err != nil {
			return nil
		}
		return va
	}
}
