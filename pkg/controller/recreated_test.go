package controller

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// TestANodeCreatedAgainUnderItsNameGetsItsStatusWritten: a node was deleted while
// its status write was on its way (the patch found no node), and created again
// under the same name while the node informer was not watching. The informer's
// relist then shows the new node as an update of the old one, with the same empty
// volumesAttached. The new node is another object: its status must list the
// volumes attached there, or kubelet waits for them forever. Found by the
// simulation (seed 1976, in 2 runs of 300 on fac580b as on ba9d10e).
func TestANodeCreatedAgainUnderItsNameGetsItsStatusWritten(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	vol := volumename.CSI(testDriver, "h-1")
	old := node("node-a", nil, nil)
	old.UID, old.ResourceVersion = "uid-old", "5"
	again := node("node-a", nil, nil)
	again.UID, again.ResourceVersion = "uid-again", "9"

	c := newTestController(t, again)
	client := c.client.(interface {
		PrependReactor(verb, resource string, reaction clienttesting.ReactionFunc)
	})
	var mu sync.Mutex
	var patches int
	var written [][]v1.AttachedVolume
	client.PrependReactor("patch", "nodes", func(a clienttesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		patches++
		if patches == 1 {
			return true, nil, apierrors.NewNotFound(v1.Resource("nodes"), "node-a")
		}
		var body struct {
			Status struct {
				VolumesAttached []v1.AttachedVolume `json:"volumesAttached"`
			} `json:"status"`
		}
		if err := json.Unmarshal(a.(clienttesting.PatchAction).GetPatch(), &body); err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		written = append(written, body.Status.VolumesAttached)
		return false, nil, nil
	})
	addToInformers(t, c, old, csiPV("pv-1", "h-1", "ns", "data"))
	c.onNode(nil, old)
	c.attachments.Observe(ctx, volumeAttachment("h-1", "node-a", pvSource("pv-1"), true))
	go c.status.Run(ctx, 1)
	if !eventually(5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return patches > 0
	}) {
		t.Fatal("node-a's status was never written")
	}

	if err := c.informers.nodes.Informer().GetIndexer().Update(again); err != nil {
		t.Fatal(err)
	}
	c.onNode(old, again)
	if !eventually(5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(written, func(list []v1.AttachedVolume) bool {
			return slices.ContainsFunc(list, func(av v1.AttachedVolume) bool { return av.Name == v1.UniqueVolumeName(vol) })
		})
	}) {
		t.Errorf("the node created again never got %s in its status", vol)
	}
}
