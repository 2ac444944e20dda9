package controller

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// What the controller remembers only for a while is forgotten on its own
// schedule, never only by the periodic pass, which
// --disable-attach-detach-reconcile-sync turns off: memory must stay bounded
// under node churn whatever the flags.
//   - A deleted node's record (the register's, the status updater's) goes once
//     nothing is recorded on the node: no pod there needs a volume and no
//     attachment is left. A node that still has some is looked at again, at
//     most deletedNodeRecheck later.
//   - The backoff entries of failures long past go every backoffExpiryPeriod.
const (
	deletedNodeRecheck  = 2 * time.Second
	backoffExpiryPeriod = time.Minute
)

func newDeletedNodesQueue() workqueue.TypedRateLimitingInterface[string] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, deletedNodeRecheck),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "deleted_nodes"})
}

// runForgetting forgets deleted nodes and expired backoff entries until ctx ends.
func (c *Controller) runForgetting(ctx context.Context) {
	defer c.deletedNodes.ShutDown()
	go wait.UntilWithContext(ctx, func(context.Context) { c.executor.ForgetExpired() }, c.backoffExpiry)
	go func() {
		for c.forgetNextDeletedNode() {
		}
	}()
	<-ctx.Done()
}

// forgetNextDeletedNode takes a deleted node from the queue and forgets it if
// nothing is recorded on it any more, or puts it back for later. It returns
// false once the queue is shut down.
func (c *Controller) forgetNextDeletedNode() bool {
	name, shutdown := c.deletedNodes.Get()
	if shutdown {
		return false
	}
	defer c.deletedNodes.Done(name)
	if c.forgetIfUnused(name) {
		c.deletedNodes.Forget(name)
	} else {
		c.deletedNodes.AddRateLimited(name)
	}
	return true
}

// forgetIfUnused forgets a deleted node that nothing is recorded on, and tells
// whether the node needs no more looking at: forgotten, or not deleted (any
// more). Something recorded on the node at the same moment finds it unknown,
// which counts every volume as mounted there: no less careful than its record.
func (c *Controller) forgetIfUnused(name string) bool {
	if c.nodes.Get(name).Presence != cache.NodeDeleted {
		return true
	}
	if len(c.desired.VolumesOnNode(name)) > 0 || c.actual.HasNode(name) {
		return false
	}
	c.nodes.Forget(name)
	c.status.Forget(name)
	return true
}
