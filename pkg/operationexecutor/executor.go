// Package operationexecutor runs attach and detach operations: at most one at a
// time per single-attach volume across the cluster, one per volume and node for the
// others, with exponential backoff after a failure. Attaching creates the
// VolumeAttachment and waits, through the informer, for the CSI external-attacher to
// mark it attached; detaching takes the volume out of node status, deletes the
// VolumeAttachment and waits until it is gone.
package operationexecutor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/csivolume"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/podevents"
)

// NodeStatusSyncer writes a node's status.volumesAttached from the actual state.
type NodeStatusSyncer interface {
	// Sync writes the node's list now if it differs, and returns once it is
	// written, with the node as it stood right after (nil if it does not exist).
	Sync(ctx context.Context, node string) (*v1.Node, error)
	// Enqueue asks for the node's list to be written soon.
	Enqueue(node string)
}

// Config holds what the executor needs.
type Config struct {
	Client     kubernetes.Interface
	VALister   storagelisters.VolumeAttachmentLister
	Actual     *cache.ActualState
	NodeStatus NodeStatusSyncer
	Events     *podevents.Emitter
	Metrics    *metrics.Metrics
	// Timeout bounds the wait for the external-attacher in one operation.
	Timeout time.Duration
	// Done is called with the volume when one of its operations ends, so that the
	// volume is reconciled again.
	Done func(csivolume.UniqueName)
}

// Executor starts operations in their own goroutines.
type Executor struct {
	cfg    Config
	locks  *locks
	waiter *waiter
}

// New returns an Executor.
func New(cfg Config) *Executor {
	return &Executor{cfg: cfg, locks: newLocks(time.Now), waiter: newWaiter()}
}

// ObserveVolumeAttachment passes what the informer saw of a VolumeAttachment (nil
// once deleted) to the operations waiting for it.
func (e *Executor) ObserveVolumeAttachment(name string, va *storagev1.VolumeAttachment) {
	e.waiter.observe(name, va)
}

// IsRunning tells whether an operation that involves the volume on the node runs.
func (e *Executor) IsRunning(volume csivolume.UniqueName, node string) bool {
	return e.locks.isRunning(volume, node)
}

// AnyRunning tells whether any operation on the volume runs.
func (e *Executor) AnyRunning(volume csivolume.UniqueName) bool {
	return e.locks.anyRunning(volume)
}

// ResetBackoff lets the next attach of the volume to the node start at once, for
// instance when the node's CSI driver has just registered. It reports whether the
// pair was backing off.
func (e *Executor) ResetBackoff(volume csivolume.UniqueName, node string) bool {
	return e.locks.resetBackoff(volume, node)
}

func lockNode(multiAttach bool, node string) string {
	if multiAttach {
		return node
	}
	return wholeVolume
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

// Attach starts attaching the volume to the node for the pods. It returns
// ErrPending or a *BackoffError when the operation cannot start now.
func (e *Executor) Attach(ctx context.Context, vol cache.Volume, node string, pods []cache.PodRef) error {
	lock := lockNode(vol.MultiAttach, node)
	if err := e.locks.acquire(vol.Name, node, lock); err != nil {
		return err
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "operation", "attach", "volume", vol.Name, "node", node)
	go func() {
		started := time.Now()
		err := e.attach(klog.NewContext(ctx, logger), vol, node)
		e.cfg.Metrics.ObserveOperation("attach", started, err)
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
		e.locks.release(vol.Name, node, lock, err != nil)
		e.cfg.Done(vol.Name)
	}()
	return nil
}

func (e *Executor) attach(ctx context.Context, vol cache.Volume, node string) error {
	name := csivolume.AttachmentName(vol.Handle, vol.Driver, node)
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
	created, err := e.cfg.Client.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{})
	switch {
	case err == nil:
		klog.FromContext(ctx).V(4).Info("Created VolumeAttachment", "volumeAttachment", name)
		e.cfg.Actual.ObserveCreated(cache.Observation{Volume: vol.Name, Node: node, VolumeAttachment: name, UID: created.UID})
	case apierrors.IsAlreadyExists(err):
	default:
		return fmt.Errorf("creating VolumeAttachment %s: %w", name, err)
	}

	waitCtx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	// The informer may not have seen the object just created: nil means "not yet"
	// until it has been seen, and "deleted" after.
	seen := false
	err = e.waiter.wait(waitCtx, name, e.current(name), func(va *storagev1.VolumeAttachment) (bool, error) {
		switch {
		case va == nil && !seen:
			return false, nil
		case va == nil:
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
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return fmt.Errorf("timed out after %s waiting for the external-attacher of %s to attach VolumeAttachment %s", e.cfg.Timeout, vol.Driver, name)
	}
	return err
}

// Detach starts detaching the volume from the node. Unless force is set (the
// node is out of service, or the wait for unmount is over), the detach is called
// off if the node turns out to report the volume in use once it no longer lists it
// as attached. It returns ErrPending or a *BackoffError when the operation cannot
// start now.
func (e *Executor) Detach(ctx context.Context, att cache.Attachment, multiAttach, force bool) error {
	lock := lockNode(multiAttach, att.Node)
	if err := e.locks.acquire(att.Volume, att.Node, lock); err != nil {
		return err
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "operation", "detach", "volume", att.Volume, "node", att.Node, "volumeAttachment", att.VolumeAttachment)
	go func() {
		started := time.Now()
		err := e.detach(klog.NewContext(ctx, logger), att, force)
		e.cfg.Metrics.ObserveOperation("detach", started, err)
		switch {
		case err == nil:
			logger.V(2).Info("Volume detached", "duration", time.Since(started))
		case ctx.Err() != nil:
			logger.V(2).Info("Detach interrupted by shutdown")
		case errors.Is(err, ErrInUse):
			logger.Info("Detach called off: the node reported the volume in use as it left node status")
		default:
			logger.Error(err, "Detach failed")
		}
		e.locks.release(att.Volume, att.Node, lock, err != nil)
		e.cfg.Done(att.Volume)
	}()
	return nil
}

func (e *Executor) detach(ctx context.Context, att cache.Attachment, force bool) (err error) {
	e.cfg.Actual.SetHiddenFromNodeStatus(att.Volume, att.Node, true)
	defer func() {
		if err != nil && e.cfg.Actual.SetHiddenFromNodeStatus(att.Volume, att.Node, false) {
			e.cfg.NodeStatus.Enqueue(att.Node)
		}
	}()
	node, err := e.cfg.NodeStatus.Sync(ctx, att.Node)
	if err != nil {
		return fmt.Errorf("removing the volume from the status of node %s before detaching: %w", att.Node, err)
	}
	// kubelet reports a volume in use before it mounts it, and mounts only a volume
	// node status lists as attached. The node as it stood once the volume left that
	// list is the last word: if kubelet reported the volume in use by then, it may
	// be mounting it.
	if !force && node != nil && slices.Contains(node.Status.VolumesInUse, v1.UniqueVolumeName(att.Volume)) {
		return ErrInUse
	}
	uid := att.UID
	opts := metav1.DeleteOptions{}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err = e.cfg.Client.StorageV1().VolumeAttachments().Delete(ctx, att.VolumeAttachment, opts)
	switch {
	case err == nil:
		e.cfg.Actual.MarkDeleting(att.Volume, att.Node)
	case apierrors.IsNotFound(err):
	case apierrors.IsConflict(err):
		return fmt.Errorf("VolumeAttachment %s was replaced by a newer one, not deleting it: %w", att.VolumeAttachment, err)
	default:
		return fmt.Errorf("deleting VolumeAttachment %s: %w", att.VolumeAttachment, err)
	}

	waitCtx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	err = e.waiter.wait(waitCtx, att.VolumeAttachment, e.current(att.VolumeAttachment), func(va *storagev1.VolumeAttachment) (bool, error) {
		switch {
		case va == nil || (uid != "" && va.UID != uid):
			return true, nil
		case va.Status.DetachError != nil:
			return true, fmt.Errorf("the external-attacher failed to detach: %s", va.Status.DetachError.Message)
		}
		return false, nil
	})
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return fmt.Errorf("timed out after %s waiting for VolumeAttachment %s to be deleted", e.cfg.Timeout, att.VolumeAttachment)
	}
	return err
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
