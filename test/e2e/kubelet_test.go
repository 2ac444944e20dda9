package e2e

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/attachdetach-controller/attachdetach-controller/internal/csidriver"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

// TestKubeletMountsOnlyAttached runs a pod on a hollow node, the real kubelet: kubelet
// stages the volume only after csi-attacher published it, with the VolumeAttachment's
// attachmentMetadata as publish context, and publishes it only after staging; the pod
// then runs. Once the pod is deleted kubelet unpublishes, then unstages, and only then
// is the VolumeAttachment deleted and the volume unpublished from the node.
func TestKubeletMountsOnlyAttached(t *testing.T) {
	c := newCluster(t, clusterOptions{hollow: true})
	node := c.Nodes[0]
	v := c.CreateVolume("data", workload.VolumeOptions{})
	c.CreatePod("app", node, v.Claim)
	c.WaitPodRunning("app")

	calls := c.nodeCalls(v, node)
	assertOrder(t, calls, csidriver.OpPublish, csidriver.OpNodeStage, csidriver.OpNodePublish)
	va := c.Attachment(v, node)
	if va == nil || !va.Status.Attached {
		t.Fatalf("VolumeAttachment %v, want one attached", va)
	}
	for _, call := range calls {
		if (call.Operation == csidriver.OpNodeStage || call.Operation == csidriver.OpNodePublish) && !maps.Equal(call.PublishContext, va.Status.AttachmentMetadata) {
			t.Errorf("%s publish context %v, want the VolumeAttachment's attachmentMetadata %v", call.Operation, call.PublishContext, va.Status.AttachmentMetadata)
		}
	}

	deleted := c.watchAttachmentDeletion(v, node)
	c.DeletePod("app")
	c.WaitDetached(v, node)
	calls = c.nodeCalls(v, node)
	assertOrder(t, calls, csidriver.OpNodePublish, csidriver.OpNodeUnpublish, csidriver.OpNodeUnstage, csidriver.OpUnpublish)
	unstaged := lastCall(calls, csidriver.OpNodeUnstage)
	if at := deleted(); at.IsZero() || !unstaged.Time.Before(at) {
		t.Errorf("NodeUnstageVolume at %s, the VolumeAttachment's deletion seen at %s: want the unstage first", unstaged.Time.Format(time.StampMicro), at.Format(time.StampMicro))
	}
	c.assertNoDetachUnderMount(v)
}

// nodeCalls returns the driver's successful calls, Controller and Node, about a
// volume on a node, in the order the driver saw them.
func (c *cluster) nodeCalls(v workload.Volume, node string) []csidriver.Call {
	return slices.DeleteFunc(c.local.Driver.Calls(), func(call csidriver.Call) bool {
		return call.VolumeID != v.Handle || call.NodeID != c.nodeID(node) || call.Code != codes.OK
	})
}

// assertOrder checks that calls has every operation of ops, and every call of each
// before every call of the next: phases, each possibly repeated, that never
// interleave.
func assertOrder(t *testing.T, calls []csidriver.Call, ops ...csidriver.Operation) {
	t.Helper()
	for i := range len(ops) - 1 {
		last, next := lastIndex(calls, ops[i]), slices.IndexFunc(calls, func(call csidriver.Call) bool { return call.Operation == ops[i+1] })
		if last < 0 || next < 0 || next < last {
			t.Errorf("want every %s before every %s, got %v", ops[i], ops[i+1], describeCalls(calls))
		}
	}
}

func lastIndex(calls []csidriver.Call, op csidriver.Operation) int {
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i].Operation == op {
			return i
		}
	}
	return -1
}

func lastCall(calls []csidriver.Call, op csidriver.Operation) csidriver.Call {
	if i := lastIndex(calls, op); i >= 0 {
		return calls[i]
	}
	return csidriver.Call{}
}

func describeCalls(calls []csidriver.Call) []string {
	var out []string
	for _, call := range calls {
		out = append(out, call.Time.Format("15:04:05.000")+" "+string(call.Operation))
	}
	return out
}

// assertNoDetachUnderMount checks that no ControllerUnpublishVolume of the volume
// came while a node plugin still had it staged on that node.
func (c *cluster) assertNoDetachUnderMount(v workload.Volume) {
	c.T.Helper()
	for _, call := range c.local.Driver.CallsFor(csidriver.OpUnpublish, v.Handle) {
		if call.StillStaged {
			c.T.Errorf("ControllerUnpublishVolume of %s from %s at %s while it was still staged there", v.Handle, call.NodeID, call.Time.Format(time.StampMicro))
		}
	}
}

// watchAttachmentDeletion watches the volume's VolumeAttachment on node from now on
// and returns a function that tells when the watch first saw its deletion requested
// (zero if not yet): an upper bound of the moment the controller deleted it.
func (c *cluster) watchAttachmentDeletion(v workload.Volume, node string) func() time.Time {
	c.T.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c.T.Cleanup(cancel)
	w, err := c.Client.StorageV1().VolumeAttachments().Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", v.AttachmentName(node)).String(),
	})
	c.Must(err)
	var mu sync.Mutex
	var seen time.Time
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			va, ok := ev.Object.(*storagev1.VolumeAttachment)
			if ok && (ev.Type == watch.Deleted || va.DeletionTimestamp != nil) {
				mu.Lock()
				if seen.IsZero() {
					seen = time.Now()
				}
				mu.Unlock()
			}
		}
	}()
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}
