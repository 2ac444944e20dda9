package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/attachments"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/writegate"
)

// The cache probe is a VolumeAttachment the leader creates when its
// VolumeAttachment informer listed before it led, as a standby's did, and
// deletes once the start-up check is over. Its create is a write made since the
// controller leads, and the API server sends a resource's changes in the order
// it made them: once the informer's cache has applied the probe's
// resourceVersion, it has applied every earlier change, the previous leader's
// last writes included. Without it, an informer of a resource that did not change
// since reaches the present only at its next bookmark, and the check lists every
// VolumeAttachment instead: 3 s at 50,000 on two cores.
//
// The probe attaches nothing: its attacher is no CSI driver's, and its node and
// PersistentVolume are names no object has. The external-attacher skips
// VolumeAttachments of other attachers, and the controller's own recorder skips
// the probe (attachments.CacheProbe).
const (
	cacheProbeAttacher = "cache-probe.attachdetach-controller.invalid"
	cacheProbeNode     = "cache-probe.attachdetach-controller.invalid"
)

// writeCacheProbe creates the cache probe and returns its resourceVersion. A
// probe left by a leader that stopped before deleting it is deleted first.
func (c *Controller) writeCacheProbe(ctx context.Context) (string, error) {
	pv := attachments.CacheProbe
	probe := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: attachments.CacheProbe},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: cacheProbeAttacher,
			NodeName: cacheProbeNode,
			Source:   storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv},
		},
	}
	c.cacheProbeSent.Store(true)
	created, err := c.createCacheProbe(ctx, probe)
	if apierrors.IsAlreadyExists(err) {
		if err := c.deleteCacheProbe(ctx); err != nil {
			return "", err
		}
		created, err = c.createCacheProbe(ctx, probe)
	}
	if err != nil {
		return "", fmt.Errorf("creating the cache probe VolumeAttachment %s: %w", attachments.CacheProbe, err)
	}
	if created.ResourceVersion == "" {
		return "", errors.New("the API server returned the cache probe without a resourceVersion")
	}
	return created.ResourceVersion, nil
}

// createCacheProbe sends the create of the probe through the write gate.
func (c *Controller) createCacheProbe(ctx context.Context, probe *storagev1.VolumeAttachment) (*storagev1.VolumeAttachment, error) {
	wctx, cancel, err := writegate.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	return c.client.StorageV1().VolumeAttachments().Create(wctx, probe, metav1.CreateOptions{})
}

// deleteCacheProbe deletes the probe, if it exists.
func (c *Controller) deleteCacheProbe(ctx context.Context) error {
	wctx, cancel, err := writegate.Open(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	err = c.client.StorageV1().VolumeAttachments().Delete(wctx, attachments.CacheProbe, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the cache probe VolumeAttachment %s: %w", attachments.CacheProbe, err)
	}
	return nil
}

// removeCacheProbe deletes the probe once the start-up check is over, if one
// was sent or the informer shows one, retrying for a while. A probe that shows
// up later, from a create whose answer came too late or a leader that stopped
// before deleting its own, is deleted when the informer shows it; one left
// anyway is deleted at the next take-over. Shadow mode writes nothing.
func (c *Controller) removeCacheProbe(ctx context.Context) {
	if c.opts.Shadow {
		return
	}
	if _, err := c.informers.attachments.Lister().Get(attachments.CacheProbe); err != nil && !c.cacheProbeSent.Load() {
		return
	}
	var last error
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: 6}
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		last = c.deleteCacheProbe(ctx)
		return last == nil, nil
	})
	if err != nil && last != nil {
		klog.FromContext(ctx).Error(last, "The cache probe is left; the next leader deletes it")
	}
}

// cacheProbe returns the start-up check's probe of the VolumeAttachment
// informer: none in shadow mode, which writes nothing.
func (c *Controller) cacheProbe() func(context.Context) (string, error) {
	if c.opts.Shadow {
		return nil
	}
	return c.writeCacheProbe
}
