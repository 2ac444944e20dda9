package operationexecutor

import (
	"context"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// TestNoDeleteIsSentOnceTheLeaseIsLostDuringTheOneBefore: a detach deletes the
// VolumeAttachments of a pair one after another. The lease is lost while the
// first delete is on its way: that delete may finish (it was sent), but the
// second must not be sent, whatever context its own request would run on. The
// stop is checked for every request, not once for the operation.
func TestNoDeleteIsSentOnceTheLeaseIsLostDuringTheOneBefore(t *testing.T) {
	const extra = "csi-extra"
	h, _ := newDetachHarness(t, time.Minute)
	h.addAttached(t, extra, testNode, "uid-extra", false)
	h.informerSeesDeletes = true
	on := h.onNode(t, testNode)
	if len(on.Objects) != 2 {
		t.Fatalf("objects on the node = %+v, want 2", on.Objects)
	}
	ctx, loseLease := context.WithCancel(t.Context())
	defer loseLease()
	h.client.PrependReactor("delete", "volumeattachments", func(clienttesting.Action) (bool, runtime.Object, error) {
		// The lease is lost while the first delete waits for its answer; the
		// answer then arrives within the grace.
		loseLease()
		return false, nil, nil
	})
	if err := h.exec.Detach(ctx, on, cache.NotForced); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	h.waitDone(t)
	h.mu.Lock()
	var sent []string
	for _, d := range h.deletes {
		sent = append(sent, d.GetName())
	}
	h.mu.Unlock()
	if want := []string{on.Objects[0].VolumeAttachment}; !slices.Equal(sent, want) {
		t.Errorf("deletes sent = %q, want only %q: the second was sent after the lease was lost", sent, want)
	}
	got := h.onNode(t, testNode)
	if !got.Objects[0].Deleting || got.Objects[1].Deleting || got.Objects[1].DeleteUnsettled {
		t.Errorf("records after the stop = %+v, want the first deleting and the second untouched", got.Objects)
	}
}

// TestNoCreateIsSentOnceTheControllerStopped: an attach that began before the
// stop sends no create after it, and forgets the record it made for that create,
// since nothing was sent.
func TestNoCreateIsSentOnceTheControllerStopped(t *testing.T) {
	h := newExecHarness(t, time.Minute)
	ctx, stop := context.WithCancel(t.Context())
	stop()
	if err := h.exec.attach(ctx, testPV, testNode); err == nil {
		t.Fatal("attach after the stop = nil, want an error")
	}
	if h.createdOn(testNode) {
		t.Error("a create was sent after the stop")
	}
	if _, recorded := h.actual.Object(testVAName); recorded {
		t.Error("the create never sent is still recorded as one that may have made the object")
	}
}
