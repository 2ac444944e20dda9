package controller

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/attachments"
)

// An informer that is not watching shows nothing that happens: once its watch
// ends with an error (410 Gone: the API server's window moved past it) or closes,
// it lists again, after a back-off that grows to 30 s, and a list that fails
// leaves it blind for longer. Another tool's VolumeAttachment made meanwhile
// holds a single-attach volume where the controller does not know it. So each
// end of a watch, failed start of one and failed list makes the actual state
// incomplete, and no single-attach attach starts until it is proven complete
// again:
//
//  1. since the last of those, a list has succeeded or a watch has started, so
//     that the informer shows what happens from then on;
//  2. a quorum list of VolumeAttachments, taken after that, names only objects
//     that the actual state records (what the event handlers have processed,
//     not only what the informer's cache holds) or that a later quorum list no
//     longer names (deleted since). The informer's cache stands for the list
//     once it has applied every change up to the cache probe written after
//     that, or a quorum read of one object where the probe cannot be written
//     (cacheAtPresent, cacheprobe.go): it then holds that moment's objects or
//     later ones, and those it no longer holds were deleted since.
//
// An end or failure during the proof starts it again. Multi-attach volumes,
// in-tree iSCSI and Fibre Channel volumes (which have no VolumeAttachment) and
// detaches do not wait. A watch the API server closes at its timeout (every 5 to
// 10 minutes) costs the cache probe's create and delete, and one quorum list
// unless the cache reaches the probe within proofListAfter; the single-attach
// attaches of that moment wait for the proof.

// proofListAfter is how long the proof after a lapse gives the informer's cache
// to reach the present before it also lists every VolumeAttachment. When
// VolumeAttachments are being made, as in an attach burst, the cache gets there
// in milliseconds, and the list would only load the API server when it is
// busiest: at 50,000 volumes on 5,000 nodes the watch ended 28 times while
// attaching, and the proofs sent 767 pages of 500 VolumeAttachments, 19 of which
// timed out after a minute. When none changes, the cache gets there by the
// cache probe, or, where the probe cannot be written, only at a bookmark. The
// start-up check gives the cache as long once it wrote the probe: on two cores
// a list of 50,000 VolumeAttachments slows the rebuild beside it.
const proofListAfter = time.Second

// incompleteReason is why single-attach attaches wait while the proof runs.
const incompleteReason = "the VolumeAttachment informer stopped watching; a single-attach volume is attached nowhere new until every VolumeAttachment that exists is known"

// proveAttachments keeps the actual state marked incomplete from each lapse of
// the VolumeAttachment informer after the proven ones until it is proven complete
// again, and then re-queues every volume a pod needs, since their attaches
// waited.
func (c *Controller) proveAttachments(ctx context.Context, proven uint64) {
	logger := klog.FromContext(ctx)
	for ctx.Err() == nil {
		lapses, resumed, changed := c.attachmentWatches.State()
		switch {
		case lapses == proven:
		case !resumed:
			logger.V(2).Info("VolumeAttachment informer is not watching; single-attach attaches wait", "lapses", lapses)
		default:
			complete, err := c.attachmentsKnown(ctx, lapses)
			if err != nil {
				logger.Error(err, "Proving that every VolumeAttachment is known; retrying")
				if !sleep(ctx, time.Second) {
					return
				}
				continue
			}
			if complete && c.attachmentWatches.IfNoLapseSince(lapses, func() { c.actual.SetIncomplete("") }) {
				proven = lapses
				logger.Info("Every VolumeAttachment is known again; single-attach attaches resume", "lapses", lapses)
				for _, v := range c.desired.Volumes() {
					c.reconciler.Enqueue(v)
				}
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// markIncomplete is told of each lapse of the VolumeAttachment informer.
func (c *Controller) markIncomplete(ctx context.Context) func() {
	return func() {
		if c.actual.Incomplete() == "" {
			klog.FromContext(ctx).Info("VolumeAttachment informer stopped watching; single-attach attaches wait until every VolumeAttachment is known again")
		}
		c.actual.SetIncomplete(incompleteReason)
	}
}

// attachmentsKnown takes a quorum list of VolumeAttachments and waits until the
// actual state records each listed object, or a later quorum list no longer names
// it. It returns false, with no error, when the informer lapsed again after
// lapses, or ctx ended.
func (c *Controller) attachmentsKnown(ctx context.Context, lapses uint64) (bool, error) {
	logger := klog.FromContext(ctx)
	existing := c.listAttachments
	held := c.informers.attachments.Informer().GetIndexer()
	present := c.presentVersion(attachmentsResource)
	if r := c.attachmentsPresent(); r != nil {
		present = r.read
	}
	at, pending, err := cacheAtPresentOrList(ctx, c, present, held, c.listAttachments, proofListAfter)
	if at {
		existing = c.cachedAttachments
		pending, err = existing(ctx)
	}
	if err != nil {
		return false, err
	}
	for {
		recorded := c.actual.ObjectNames()
		for name, uid := range pending {
			if have, ok := recorded[name]; name == attachments.CacheProbe || ok && (have == uid || have == "") {
				delete(pending, name)
			}
		}
		if len(pending) == 0 {
			return true, nil
		}
		logger.V(2).Info("Waiting for the VolumeAttachment informer to show what exists", "missing", len(pending))
		if !sleep(ctx, 200*time.Millisecond) {
			return false, nil
		}
		if now, _, _ := c.attachmentWatches.State(); now != lapses {
			return false, nil
		}
		now, err := existing(ctx)
		if err != nil {
			return false, err
		}
		for name, uid := range pending {
			if now[name] != uid {
				delete(pending, name)
			}
		}
	}
}

// cachedAttachments returns the name and UID of every VolumeAttachment the
// informer's cache holds.
func (c *Controller) cachedAttachments(context.Context) (map[string]types.UID, error) {
	vas, err := c.informers.attachments.Lister().List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing VolumeAttachments from the informer: %w", err)
	}
	out := make(map[string]types.UID, len(vas))
	for _, va := range vas {
		out[va.Name] = va.UID
	}
	return out, nil
}

// sleep waits for d, and reports false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
