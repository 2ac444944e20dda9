package controller

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/interleave"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
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

// rebuild fills the state from the synced informers before any decision. The
// event handlers are registered first and deliver every object as an addition, so
// that nothing deleted or changed from here on is missed; the pods they queue are
// evaluated at once. An attached volume that its node's status does not list and
// that no pod there needs was being detached when the previous controller stopped:
// it stays out of node status. The in-tree iSCSI and Fibre Channel volumes a
// managed node's status lists are attached there: node status is their only record.
func (c *Controller) rebuild(ctx context.Context) error {
	regs, err := c.registerHandlers(ctx)
	if err != nil {
		return err
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), regs...) {
		return fmt.Errorf("event handlers did not sync: %w", ctx.Err())
	}
	c.populator.Drain(ctx)
	nodes, err := c.informers.nodes.Lister().List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing nodes from the informer: %w", err)
	}
	for _, n := range nodes {
		listed := make(map[volumename.UniqueName]bool, len(n.Status.VolumesAttached))
		for _, av := range n.Status.VolumesAttached {
			name := volumename.UniqueName(av.Name)
			listed[name] = true
			if volumename.ReportOnly(name) && cache.IsManaged(n) {
				c.actual.AddReportOnly(name, n.Name, c.multiAttachOf(name))
			}
		}
		for _, v := range c.actual.VolumesOnNode(n.Name) {
			on, ok := c.actual.Get(v, n.Name)
			if ok && on.Attached() && !listed[v] && !c.desired.IsDesired(v, n.Name) {
				c.actual.SetHiddenFromNodeStatus(v, n.Name, true)
			}
		}
	}
	return nil
}

// multiAttachOf tells whether a volume known only by name may be attached to
// several nodes: it may if a pod's view of it says so; with no pod, nothing says so.
func (c *Controller) multiAttachOf(name volumename.UniqueName) bool {
	desired, ok := c.desired.Volume(name)
	return ok && desired.Spec.MultiAttach
}

// reconcileNodes brings the node register in line with the node informer: a node
// whose deletion was missed counts as deleted, and a deleted node that nothing
// refers to any more is forgotten.
func (c *Controller) reconcileNodes() error {
	nodes, err := c.informers.nodes.Lister().List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing nodes from the informer: %w", err)
	}
	present := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		present[n.Name] = true
		now := cache.NodeFromObject(n)
		if prev := c.nodes.Set(now); nodeDecisionsChanged(prev, now) {
			c.enqueueNodeVolumes(n.Name)
		}
	}
	for _, name := range c.nodes.Names() {
		switch n := c.nodes.Get(name); {
		case present[name]:
		case n.Exists():
			c.forgetNode(name, nil)
		case len(c.desired.VolumesOnNode(name)) == 0 && !c.actual.HasNode(name):
			c.nodes.Forget(name)
		}
	}
	return nil
}

// reconcileAttachments brings the actual state in line with the VolumeAttachment
// informer: objects it holds that the state lacks are recorded, and objects the
// informer showed once but holds no more are forgotten. Objects the controller
// created, or tried to, and never saw, and objects whose delete had an unknown
// outcome, are read from the API server, unless an operation on them runs.
func (c *Controller) reconcileAttachments(ctx context.Context) error {
	vas, err := c.informers.attachments.Lister().List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing VolumeAttachments from the informer: %w", err)
	}
	interleave.At(ctx, "resync-attachments-listed", "")
	recorded := c.actual.ObjectNames()
	inInformer := make(map[string]bool, len(vas))
	for _, va := range vas {
		inInformer[va.Name] = true
		if uid, ok := recorded[va.Name]; !ok || uid != va.UID {
			c.observeVolumeAttachment(ctx, va)
		}
	}
	for name, uid := range recorded {
		if !inInformer[name] {
			c.forgetVolumeAttachment(name, uid)
		}
	}
	for _, att := range c.actual.Unsettled() {
		if att.DeleteUnsettled || !inInformer[att.VolumeAttachment] {
			c.executor.Settle(ctx, att)
		}
	}
	return nil
}
