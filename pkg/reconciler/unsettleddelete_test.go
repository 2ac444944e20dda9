package reconciler_test

import (
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

// TestUnsettledDeleteKeepsTheVolumeHiddenWhenAPodWantsItAgain: the detach sent
// its delete, the API server carried it out but the answer was lost, and the read
// meant to settle it failed too; the executor rightly keeps the volume out of node
// status, since the VolumeAttachment may be on its way out. A pod then wants the
// volume on the same node again. The record is still attached and not marked
// deleting (the outcome is unknown), so reportAgain lists the volume in node
// status again, and kubelet may mount a volume the external-attacher is about to
// detach. The volume must stay hidden until the informer or a read settles the
// delete.
func TestUnsettledDeleteKeepsTheVolumeHiddenWhenAPodWantsItAgain(t *testing.T) {
	h := newHarnessWith(t, harnessOpts{timeout: 300 * time.Millisecond})
	lost := apierrors.NewInternalError(errors.New("etcd leader changed"))
	h.client.PrependReactor("delete", "volumeattachments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if err := h.client.Tracker().Delete(vaResource, "", a.(clienttesting.DeleteAction).GetName()); err != nil {
			t.Error(err)
		}
		return true, nil, lost
	})
	h.client.PrependReactor("get", "volumeattachments", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, lost
	})
	h.node("node-a")
	h.attachment(rwo, "node-a", true)

	h.sync(rwo)
	h.waitIdle()
	if h.exists(rwo, "node-a") {
		t.Fatal("setup: the delete did not reach the API server")
	}
	on := h.onNode(rwo, "node-a")
	if !on.HiddenFromNodeStatus || on.Reported() {
		t.Fatalf("setup: after a delete of unknown outcome %+v, want the volume hidden", on)
	}

	// A pod on the same node wants the volume again; the informer has said
	// nothing yet.
	h.pod("ns", "db-a", "node-a", rwo)
	h.sync(rwo)
	if on := h.onNode(rwo, "node-a"); !on.HiddenFromNodeStatus || on.Reported() {
		t.Errorf("after a pass with the pod back: %+v; want the volume still hidden, its VolumeAttachment may be being deleted", on)
	}
	if got := h.status.enqueuedNodes(); len(got) != 0 {
		t.Errorf("node status enqueued %q, want nothing: the volume must not be listed again", got)
	}
}
