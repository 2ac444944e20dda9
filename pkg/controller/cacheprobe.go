package controller

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/attachments"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/writegate"
)

// The cache probe is a VolumeAttachment the leader creates to prove its
// VolumeAttachment informer current: at a take-over, when the informer listed
// before the controller led, as a standby's did, and after a lapse of its watch
// (see relist.go). The create is a write made since the controller leads, or
// since the lapse, and the API server sends a resource's changes in the order it
// made them: once the informer's cache has applied the probe's resourceVersion,
// it has applied every earlier change, the previous leader's last writes
// included. Without it, the cache of a resource that did not change since
// reaches the present only at its next bookmark, and the controller lists every
// VolumeAttachment instead: 3 s at 50,000 on two cores, most of a hand-over.
//
// The probe attaches nothing: its attacher is no CSI driver's, and its node and
// PersistentVolume are names no object has. The external-attacher skips
// VolumeAttachments of other attachers, and the controller's recorder skips the
// probe (attachments.CacheProbe). The leader deletes every probe its informer
// shows, its own once the informer has applied it, and one left by a leader that
// stopped before it deleted its own.
const (
	cacheProbeAttacher = "cache-probe.attachdetach-controller.invalid"
	cacheProbeNode     = "cache-probe.attachdetach-controller.invalid"
)

// presentReader reads the present's resourceVersion of the VolumeAttachments
// for a check of the informer: it writes the cache probe and falls back to a
// quorum read of one object if the probe fails. probed tells, once read has
// answered, whether the probe gave the answer.
type presentReader struct {
	c      *Controller
	probed atomic.Bool
}

// attachmentsPresent returns the reader of the VolumeAttachments' present, or
// nil where the controller writes nothing (shadow mode): then the quorum read
// of one object reads it.
func (c *Controller) attachmentsPresent() *presentReader {
	if c.opts.Shadow {
		return nil
	}
	return &presentReader{c: c}
}

func (p *presentReader) read(ctx context.Context) (string, error) {
	rv, err := p.c.writeCacheProbe(ctx)
	if err == nil {
		p.probed.Store(true)
		return rv, nil
	}
	klog.FromContext(ctx).Info("Could not write the cache probe; reading the present instead", "err", err)
	return p.c.presentVersion(attachmentsResource)(ctx)
}

// writeCacheProbe creates the cache probe and returns its resourceVersion. A
// probe not deleted yet is deleted first.
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

// removeCacheProbe deletes the probe the informer shows, retrying for a while;
// a probe still left is deleted when the informer shows it again, at the next
// relist or take-over.
func (c *Controller) removeCacheProbe(ctx context.Context) {
	var last error
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: 6}
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		last = c.deleteCacheProbe(ctx)
		return last == nil, nil
	})
	if err != nil && last != nil {
		klog.FromContext(ctx).Error(last, "The cache probe is left; it is deleted when the informer shows it again")
	}
}
