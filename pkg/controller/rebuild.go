package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// rebuild fills the state from the synced informers before any decision
// (fillState), then keeps out of node status what was being detached
// (hideDetaching). It tells how many pod evaluations it made: one per pod,
// unless a pod changed meanwhile.
func (c *Controller) rebuild(ctx context.Context) (int, error) {
	evaluated, err := c.fillState(ctx)
	if err != nil {
		return evaluated, err
	}
	return evaluated, c.hideDetaching()
}

// fillState registers the event handlers, which deliver every object the
// informers hold as an addition, so that nothing deleted or changed from here on
// is missed, and returns once they have. The pods they queue are evaluated as
// they come.
func (c *Controller) fillState(ctx context.Context) (int, error) {
	regs, err := c.registerHandlers(ctx)
	if err != nil {
		return 0, err
	}
	// The pods are evaluated while the handlers still deliver: an evaluation
	// reads only the synced informers, and the handlers' work for the other
	// resources goes on beside it.
	delivered := make(chan struct{})
	var synced bool
	go func() {
		defer close(delivered)
		synced = toolscache.WaitFor(ctx, "", regs...)
	}()
	evaluated := c.populator.Drain(ctx, c.opts.Workers, delivered)
	<-delivered
	if !synced {
		return evaluated, fmt.Errorf("event handlers did not sync: %w", ctx.Err())
	}
	return evaluated, nil
}

// hideDetaching rests on every VolumeAttachment and node being recorded. An
// attached volume that its node's status does not list and that no pod there
// needs was being detached when the previous controller stopped: it stays out
// of node status. The in-tree iSCSI and Fibre Channel volumes a managed node's
// status lists are attached there: node status is their only record.
func (c *Controller) hideDetaching() error {
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
		for _, v := range c.actual.AttachedOnNode(n.Name) {
			if !listed[v] && !c.desired.IsDesired(v, n.Name) {
				c.actual.SetHiddenFromNodeStatus(v, n.Name, true)
			}
		}
	}
	return nil
}

// waitForHandlers waits until each informer's event handler has finished with
// every object its cache holds now, at that version or a later one, or the cache
// no longer holds that object. After the informer was proven current, what the
// handler records then holds the present too.
func (c *Controller) waitForHandlers(ctx context.Context, informers ...*delivered) error {
	for _, d := range informers {
		if err := d.caughtUp(ctx); err != nil {
			return err
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

// The periodic pass compares what an informer holds with what the controller
// recorded from it while that informer's event handlers wait (nodesMu here; the
// attachments.Recorder keeps its own lock for VolumeAttachments): an informer's
// cache holds an event before its handlers are told, so under the lock nothing
// recorded is newer than the informer's cache, and an event handled after the
// pass's list applies after the pass's changes. A list taken before the records
// were read would forget an object added in between, and bring back one deleted
// in between.

// reconcileNodes brings the node register in line with the node informer: a node
// whose deletion was missed counts as deleted (and is forgotten once nothing is
// recorded on it, see forget.go), and a node whose changes were missed is
// recorded as the informer holds it.
func (c *Controller) reconcileNodes() error {
	c.nodesMu.Lock()
	defer c.nodesMu.Unlock()
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
		if !present[name] && c.nodes.Get(name).Exists() {
			c.forgetNode(name, nil)
		}
	}
	return nil
}
