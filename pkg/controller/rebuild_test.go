package controller

import (
	"context"
	"testing"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
)

// TestRebuildFailsWhenItsEventHandlersCannotBeRegistered: informers that stopped
// take no event handler; rebuilding the state without them would leave the
// controller deciding on what it never hears about again.
func TestRebuildFailsWhenItsEventHandlersCannotBeRegistered(t *testing.T) {
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	c, err := New(Clients{API: client, NodeStatus: client}, factory, record.NewFakeRecorder(10), metrics.New(), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	cancel()
	factory.Shutdown()
	if err := c.rebuild(context.Background()); err == nil {
		t.Error("rebuild with stopped informers succeeded, want an error")
	}
}
