package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
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

	opts := DefaultOptions()
	opts.DisableSync = true
	c, err := New(Clients{API: client, NodeStatus: client}, informers.NewSharedInformerFactory(client, 0), record.NewFakeRecorder(100), metrics.New(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Cleanup(c.factory.Shutdown)
	var onA, onB []volumename.UniqueName
	err = c.Run(ctx, func() {
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
