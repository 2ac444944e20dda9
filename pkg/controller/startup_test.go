package controller

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// TestStartUpWaitsForTheNodeInformer: node status is the only record of an
// iSCSI or Fibre Channel attachment. The previous leader moved an RWO iSCSI
// volume from node-b to node-a, which has it mounted; the new leader's node
// informer has not shown those status writes yet. Had the controller rebuilt its
// state from that informer, it would list the volume on node-b again while
// node-a has it mounted, and, once the informer caught up, take it out of
// node-a's status. It must first wait for the informer to hold every node at
// least as a quorum read shows it (found by review).
func TestStartUpWaitsForTheNodeInformer(t *testing.T) {
	iscsi := volumename.ISCSI("10.0.0.1:3260", "iqn.2001-04.com.example:disk1", 0)
	atVersion := func(n *v1.Node, rv string) *v1.Node {
		n.ResourceVersion = rv
		return n
	}
	current := []*v1.Node{
		atVersion(node("node-a", []volumename.UniqueName{iscsi}, []volumename.UniqueName{iscsi}), "7"),
		atVersion(node("node-b", nil, nil), "8"),
	}
	informed := &v1.NodeList{Items: []v1.Node{
		*atVersion(node("node-a", nil, nil), "5"),
		*atVersion(node("node-b", []volumename.UniqueName{iscsi}, nil), "4"),
	}}
	informed.ResourceVersion = "5"

	client := fake.NewClientset(current[0], current[1])
	// The informer lists (resourceVersion "0", from its cache) the old nodes, and
	// its watch delivers the new ones only later; a quorum list (resourceVersion
	// "") reads the new ones.
	client.PrependReactor("list", "nodes", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.(clienttesting.ListActionImpl).GetListOptions().ResourceVersion == "0" {
			return true, informed.DeepCopy(), nil
		}
		return false, nil, nil
	})
	watcher := watch.NewFake()
	client.PrependWatchReactor("nodes", clienttesting.DefaultWatchReactor(watcher, nil))
	go func() {
		time.Sleep(500 * time.Millisecond)
		for _, n := range current {
			watcher.Modify(n.DeepCopy())
		}
	}()

	c := newControllerWithoutPass(t, client)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Cleanup(c.factory.Shutdown)
	var onA, onB []volumename.UniqueName
	err := c.Run(ctx, func() {
		onA, onB = c.actual.ReportedVolumes("node-a"), c.actual.ReportedVolumes("node-b")
		cancel()
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !slices.Equal(onA, []volumename.UniqueName{iscsi}) || len(onB) != 0 {
		t.Errorf("at the first decision node-a reports %v and node-b %v, want %s on node-a only, as the API server has it", onA, onB, iscsi)
	}
}

// TestStartUpRetriesAFailedQuorumList: a quorum list that fails says nothing of
// what exists, so it cannot show the informers current: the controller lists again
// until one answers, and decides only once the informers hold what it showed. The
// informers first list nothing new, and their watches deliver the present 500 ms
// later; the first quorum lists of one resource fail.
func TestStartUpRetriesAFailedQuorumList(t *testing.T) {
	tests := []struct {
		resource string
		// current tells whether the informer holds the object as a quorum read shows it.
		current func(c *Controller) bool
	}{
		{"volumeattachments", func(c *Controller) bool {
			_, err := c.informers.attachments.Lister().Get(volumeAttachment("h-1", "node-a", pvSource("pv-1"), true).Name)
			return err == nil
		}},
		{"nodes", func(c *Controller) bool {
			n, err := c.informers.nodes.Lister().Get("node-a")
			return err == nil && n.ResourceVersion == "7"
		}},
	}
	for _, tc := range tests {
		t.Run(tc.resource, func(t *testing.T) {
			va := volumeAttachment("h-1", "node-a", pvSource("pv-1"), true)
			current := node("node-a", nil, nil)
			current.ResourceVersion = "7"
			client := fake.NewClientset(current, va)
			informed := map[string]runtime.Object{
				"volumeattachments": &storagev1.VolumeAttachmentList{},
				"nodes":             &v1.NodeList{Items: []v1.Node{*node("node-a", nil, nil)}},
			}
			informed["nodes"].(*v1.NodeList).Items[0].ResourceVersion = "5"
			var failures atomic.Int32
			client.PrependReactor("list", tc.resource, func(a clienttesting.Action) (bool, runtime.Object, error) {
				if a.(clienttesting.ListActionImpl).GetListOptions().ResourceVersion == "0" {
					return true, informed[tc.resource].DeepCopyObject(), nil
				}
				if failures.Add(1) <= 3 {
					return true, nil, errors.New("etcdserver: request timed out")
				}
				return false, nil, nil
			})
			watcher := watch.NewFake()
			client.PrependWatchReactor(tc.resource, clienttesting.DefaultWatchReactor(watcher, nil))
			go func() {
				time.Sleep(500 * time.Millisecond)
				if tc.resource == "nodes" {
					watcher.Modify(current.DeepCopy())
				} else {
					watcher.Add(va.DeepCopy())
				}
			}()

			c := newControllerWithoutPass(t, client)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			t.Cleanup(c.factory.Shutdown)
			wasCurrent := false
			err := c.Run(ctx, func() {
				wasCurrent = tc.current(c)
				cancel()
			})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if !wasCurrent {
				t.Errorf("the first decision came before the %s informer held what the API server has (quorum lists tried: %d)", tc.resource, failures.Load())
			}
		})
	}
}

// TestStartUpWaitsForAVolumeAttachmentMadeAgain: the previous leader's
// VolumeAttachment of an RWO volume on node-a was deleted and, with the same
// name, created again; the new leader's informer listed the old object, being
// deleted, and its watch delivers the deletion and the new object only later.
// The start-up check compared names only, so the controller decided with the old
// object: once its deletion arrived, nothing held the volume on node-a until the
// new one did, and the controller attached the volume to node-b meanwhile
// (simulation seed 6131). The first decision must come once the informer holds
// the object that exists.
func TestStartUpWaitsForAVolumeAttachmentMadeAgain(t *testing.T) {
	current := volumeAttachment("h-1", "node-a", pvSource("pv-1"), true)
	old := current.DeepCopy()
	old.UID = "uid-deleted-since"
	old.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	client := fake.NewClientset(node("node-a", nil, nil), csiPV("pv-1", "h-1", "ns", "claim-1", v1.ReadWriteOnce), current)
	client.PrependReactor("list", "volumeattachments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.(clienttesting.ListActionImpl).GetListOptions().ResourceVersion == "0" {
			return true, &storagev1.VolumeAttachmentList{Items: []storagev1.VolumeAttachment{*old.DeepCopy()}}, nil
		}
		return false, nil, nil
	})
	watcher := watch.NewFake()
	client.PrependWatchReactor("volumeattachments", clienttesting.DefaultWatchReactor(watcher, nil))
	go func() {
		time.Sleep(500 * time.Millisecond)
		watcher.Delete(old.DeepCopy())
		watcher.Add(current.DeepCopy())
	}()

	c := newControllerWithoutPass(t, client)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Cleanup(c.factory.Shutdown)
	var first cache.Attachment
	err := c.Run(ctx, func() {
		first, _ = c.actual.Object(current.Name)
		cancel()
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if first.UID != current.UID {
		t.Errorf("at the first decision the state records %s with UID %q, want the one that exists, %q", current.Name, first.UID, current.UID)
	}
}

func TestAtLeastVersionComparesResourceVersions(t *testing.T) {
	tests := []struct {
		have, want string
		ok         bool
	}{
		{"7", "5", true},
		{"7", "7", true},
		{"5", "7", false},
		{"10", "9", true},
		{"x1", "x1", true},
		{"x1", "x2", false},
		{"x2", "x1", false},
	}
	for _, tc := range tests {
		if got := atLeastVersion(tc.have, tc.want); got != tc.ok {
			t.Errorf("atLeastVersion(%q, %q) = %t, want %t", tc.have, tc.want, got, tc.ok)
		}
	}
}
