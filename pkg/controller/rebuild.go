package controller

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/csivolume"
)

// waitForCurrentVolumeAttachments makes sure the VolumeAttachment informer holds
// every VolumeAttachment that exists now, as a quorum read from etcd sees them:
// after a fail-over, the previous leader's last writes must be known before the
// first decision, or a single-attach volume could be attached twice.
func (c *Controller) waitForCurrentVolumeAttachments(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	return wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		missing := 0
		opts := metav1.ListOptions{Limit: 500}
		for {
			list, err := c.client.StorageV1().VolumeAttachments().List(ctx, opts)
			if err != nil {
				logger.Error(err, "Listing VolumeAttachments to check the informer is current; retrying")
				return false, nil
			}
			for i := range list.Items {
				if _, err := c.informers.attachments.Lister().Get(list.Items[i].Name); err != nil {
					missing++
				}
			}
			if list.Continue == "" {
				break
			}
			opts.Continue = list.Continue
		}
		if missing > 0 {
			logger.Info("VolumeAttachment informer is behind the API server; waiting", "missing", missing)
			return false, nil
		}
		return true, nil
	})
}

// rebuild fills the state from the synced informers before any decision: nodes,
// then the desired state from every pod, then the actual state from every
// VolumeAttachment. An attached volume that its node's status no longer lists and
// that no pod there needs was being detached when the previous controller stopped:
// it stays out of node status.
func (c *Controller) rebuild(ctx context.Context) {
	nodes, err := c.informers.nodes.Lister().List(everything)
	if err == nil {
		for _, n := range nodes {
			c.nodes.Set(cache.NodeFromObject(n))
		}
	}
	if err := c.populator.SyncAll(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Rebuilding the desired state")
	}
	vas, err := c.informers.attachments.Lister().List(everything)
	if err != nil {
		klog.FromContext(ctx).Error(fmt.Errorf("listing VolumeAttachments from the informer: %w", err), "Rebuilding the actual state")
		return
	}
	for _, va := range vas {
		c.observeVolumeAttachment(ctx, va)
	}
	for _, n := range nodes {
		listed := make(map[csivolume.UniqueName]bool, len(n.Status.VolumesAttached))
		for _, av := range n.Status.VolumesAttached {
			listed[csivolume.UniqueName(av.Name)] = true
		}
		for _, v := range c.actual.VolumesOnNode(n.Name) {
			att, ok := c.actual.Get(v, n.Name)
			if ok && att.Attached && !listed[v] && !c.desired.IsDesired(v, n.Name) {
				c.actual.SetHiddenFromNodeStatus(v, n.Name, true)
			}
		}
	}
}
