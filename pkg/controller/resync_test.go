package controller

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// Deletions the event handlers never delivered (an informer that relisted while
// the controller was starting, for instance) are healed by the periodic pass: the
// RWO volume is no longer held by the VolumeAttachment that is gone, and the node
// that is gone no longer counts as Ready.
func TestPeriodicPassHealsMissedDeletions(t *testing.T) {
	ctx := context.Background()
	vol := volumename.CSI(testDriver, "h-1")
	va := volumeAttachment("h-1", "node-a", pvSource("pv-1"), true)
	gone := node("node-a", nil, nil)
	c := startedController(t, gone, csiPV("pv-1", "h-1", "ns", "data"), va)
	if _, err := c.rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.actual.Holders(vol, "pv-1", "node-b"); !slices.Equal(got, []string{"node-a"}) {
		t.Fatalf("Holders() = %q before, want [node-a]", got)
	}
	// The objects leave the informers' caches without a delete event.
	if err := c.informers.attachments.Informer().GetIndexer().Delete(va); err != nil {
		t.Fatal(err)
	}
	if err := c.informers.nodes.Informer().GetIndexer().Delete(gone); err != nil {
		t.Fatal(err)
	}
	c.resync(ctx)
	if got := c.actual.Holders(vol, "pv-1", "node-b"); len(got) != 0 {
		t.Errorf("Holders() = %q after the periodic pass, want none: the VolumeAttachment is gone", got)
	}
	if n := c.nodes.Get("node-a"); n.Exists() || n.Ready {
		t.Errorf("node-a = %+v after the periodic pass, want deleted and not Ready", n)
	}
	// Nothing is recorded on the deleted node any more: it is forgotten.
	if c.deletedNodes.Len() != 1 || !c.forgetNextDeletedNode() {
		t.Fatalf("node-a is not queued to be forgotten")
	}
	if names := c.nodes.Names(); slices.Contains(names, "node-a") {
		t.Errorf("node register still remembers node-a: %q", names)
	}
}

// A VolumeAttachment the handlers never delivered is recorded by the periodic pass.
func TestPeriodicPassRecordsMissedAdditions(t *testing.T) {
	ctx := context.Background()
	vol := volumename.CSI(testDriver, "h-1")
	c := startedController(t, csiPV("pv-1", "h-1", "ns", "data"))
	if _, err := c.rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.informers.attachments.Informer().GetIndexer().Add(volumeAttachment("h-1", "node-a", pvSource("pv-1"), true)); err != nil {
		t.Fatal(err)
	}
	c.resync(ctx)
	if got := c.actual.Holders(vol, "pv-1", "node-b"); !slices.Equal(got, []string{"node-a"}) {
		t.Errorf("Holders() = %q after the periodic pass, want [node-a]", got)
	}
}

// Each case changes the API server right after the periodic pass has listed the
// informer, and lets the informer deliver the change to the event handlers
// before the pass goes on, if the handlers can run then. However the two meet,
// the state must end up showing the change: the pass must not act on its list
// as if nothing had happened since (found by review: the pass forgot a
// VolumeAttachment added in between, so the RWO volume lost its holder).
func TestPeriodicPassAgainstEventsHandledMeanwhile(t *testing.T) {
	vol := volumename.CSI(testDriver, "h-1")
	va := volumeAttachment("h-1", "node-a", pvSource("pv-1"), true)
	pv := csiPV("pv-1", "h-1", "ns", "data")
	notReady := func(n *v1.Node) *v1.Node {
		n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionFalse}}
		return n
	}
	tests := []struct {
		name    string
		objs    []runtime.Object
		nodes   bool // the pass step on nodes, else on VolumeAttachments
		change  func(ctx context.Context, c *Controller) error
		handled func(c *Controller) bool
	}{
		{
			name: "VolumeAttachment added",
			objs: []runtime.Object{pv},
			change: func(ctx context.Context, c *Controller) error {
				_, err := c.client.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{})
				return err
			},
			handled: func(c *Controller) bool {
				return slices.Equal(c.actual.Holders(vol, "pv-1", "node-b"), []string{"node-a"})
			},
		},
		{
			name: "VolumeAttachment deleted",
			objs: []runtime.Object{pv, va},
			change: func(ctx context.Context, c *Controller) error {
				return c.client.StorageV1().VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{})
			},
			handled: func(c *Controller) bool { return len(c.actual.Holders(vol, "pv-1", "node-b")) == 0 },
		},
		{
			name:  "node updated",
			objs:  []runtime.Object{node("node-a", nil, nil)},
			nodes: true,
			change: func(ctx context.Context, c *Controller) error {
				_, err := c.client.CoreV1().Nodes().Update(ctx, notReady(node("node-a", nil, nil)), metav1.UpdateOptions{})
				return err
			},
			handled: func(c *Controller) bool { n := c.nodes.Get("node-a"); return n.Exists() && !n.Ready },
		},
		{
			name:  "node added",
			nodes: true,
			change: func(ctx context.Context, c *Controller) error {
				_, err := c.client.CoreV1().Nodes().Create(ctx, node("node-a", nil, nil), metav1.CreateOptions{})
				return err
			},
			handled: func(c *Controller) bool { n := c.nodes.Get("node-a"); return n.Exists() && n.Ready },
		},
		{
			name:  "node deleted",
			objs:  []runtime.Object{node("node-a", nil, nil)},
			nodes: true,
			change: func(ctx context.Context, c *Controller) error {
				return c.client.CoreV1().Nodes().Delete(ctx, "node-a", metav1.DeleteOptions{})
			},
			handled: func(c *Controller) bool { return c.nodes.Get("node-a").Presence == cache.NodeDeleted },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := startedController(t, tc.objs...)
			// The change is made once the pass has listed; the handlers get up
			// to 300 ms to record it before the pass goes on. The
			// VolumeAttachment lister is hooked before the handlers are
			// registered, which share its recorder with the pass.
			var inPass atomic.Bool
			var once sync.Once
			afterList := func() {
				if !inPass.Load() {
					return
				}
				once.Do(func() {
					if err := tc.change(ctx, c); err != nil {
						t.Error(err)
					}
					deadline := time.Now().Add(300 * time.Millisecond)
					for !tc.handled(c) && time.Now().Before(deadline) {
						time.Sleep(5 * time.Millisecond)
					}
				})
			}
			if !tc.nodes {
				c.attachments = c.newAttachments(hookedAttachmentLister{c.informers.attachments.Lister(), afterList})
			}
			if _, err := c.rebuild(ctx); err != nil {
				t.Fatal(err)
			}
			inPass.Store(true)
			var err error
			if tc.nodes {
				c.informers.nodes = hookedNodes{c.informers.nodes, afterList}
				err = c.reconcileNodes()
			} else {
				err = c.attachments.Reconcile(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			// Whatever the handlers did not get to do during the pass, they do
			// after it.
			deadline := time.Now().Add(5 * time.Second)
			for !tc.handled(c) && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if !tc.handled(c) {
				t.Errorf("the state does not show the change once the pass and the handlers are done: holders %q, node-a %+v",
					c.actual.Holders(vol, "pv-1", "node-b"), c.nodes.Get("node-a"))
			}
		})
	}
}

// hookedNodes calls afterList each time its lister has listed.
type hookedNodes struct {
	coreinformers.NodeInformer
	afterList func()
}

func (h hookedNodes) Lister() corelisters.NodeLister {
	return hookedNodeLister{h.NodeInformer.Lister(), h.afterList}
}

type hookedNodeLister struct {
	corelisters.NodeLister
	afterList func()
}

func (l hookedNodeLister) List(selector labels.Selector) ([]*v1.Node, error) {
	out, err := l.NodeLister.List(selector)
	l.afterList()
	return out, err
}

// hookedAttachmentLister calls afterList each time it has listed.
type hookedAttachmentLister struct {
	storagelisters.VolumeAttachmentLister
	afterList func()
}

func (l hookedAttachmentLister) List(selector labels.Selector) ([]*storagev1.VolumeAttachment, error) {
	out, err := l.VolumeAttachmentLister.List(selector)
	l.afterList()
	return out, err
}
