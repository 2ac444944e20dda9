package controller

import (
	"context"
	"fmt"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/explain"
)

// Snapshot fills the state from the informers as the start-up rebuild does, and
// starts nothing else: no operation, no write. It lets a command explain the
// cluster as it is, read with its caller's credentials.
func (c *Controller) Snapshot(ctx context.Context) error {
	c.factory.Start(ctx.Done())
	for typ, ok := range c.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer for %v did not sync", typ)
		}
	}
	_, err := c.rebuild(ctx)
	return err
}

// Explainer explains the controller's state with its own rules (see package
// explain).
func (c *Controller) Explainer() *explain.Explainer {
	return explain.New(explain.Source{
		Listers: explain.Listers{
			Pods:        c.informers.pods.Lister(),
			Claims:      c.informers.claims.Lister(),
			PVs:         c.informers.pvs.Lister(),
			Nodes:       c.informers.nodes.Lister(),
			Attachments: c.informers.attachments.Lister(),
		},
		Desired:    c.desired,
		Actual:     c.actual,
		Nodes:      c.nodes,
		Resolver:   c.populator,
		Rules:      c.reconciler,
		Operations: c.executor,
	})
}
