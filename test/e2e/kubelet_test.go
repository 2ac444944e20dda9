package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/attachdetach-controller/attachdetach-controller/internal/csidriver"
	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
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
	v := c.RunningVolume("data", "app", node)

	calls := c.nodeCalls(v, node)
	assertStartOrder(t, calls, csidriver.OpPublish, csidriver.OpNodeStage, csidriver.OpNodePublish)
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
// interleave, as a volume's tear-down must.
func assertOrder(t *testing.T, calls []csidriver.Call, ops ...csidriver.Operation) {
	t.Helper()
	for i := range len(ops) - 1 {
		last, next := lastIndex(calls, ops[i]), slices.IndexFunc(calls, func(call csidriver.Call) bool { return call.Operation == ops[i+1] })
		if last < 0 || next < 0 || next < last {
			t.Errorf("want every %s before every %s, got %v", ops[i], ops[i+1], describeCalls(calls))
		}
	}
}

// assertStartOrder checks that calls has every operation of ops, and the first call
// of each after the first of the one before: how a volume is set up, where a later
// repeat of an idempotent call (csi-attacher publishing again, kubelet staging again
// after a restart) is fine.
func assertStartOrder(t *testing.T, calls []csidriver.Call, ops ...csidriver.Operation) {
	t.Helper()
	prev := -1
	for _, op := range ops {
		i := slices.IndexFunc(calls, func(call csidriver.Call) bool { return call.Operation == op })
		if i < 0 || i < prev {
			t.Errorf("want the first calls of %v in this order, got %v", ops, describeCalls(calls))
			return
		}
		prev = i
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

// TestKubeletRWOMove moves a ReadWriteOnce volume between two hollow nodes: the pod
// on the second node waits with a FailedAttachVolume event naming the first pod, and
// runs once the first pod is gone; the first node unstaged the volume before it was
// unpublished there, and it was never published on both at once.
func TestKubeletRWOMove(t *testing.T) {
	c := newCluster(t, clusterOptions{hollow: true})
	a, b := c.Nodes[0], c.Nodes[1]
	v := c.RunningVolume("data", "first", a)

	c.CreatePod("second", b, v.Claim)
	c.WaitEvent("second", `Warning FailedAttachVolume Waiting for detach for volume "`+v.PV+`" Volume is already used by pod(s) first`)
	if c.podPhase("second") == corev1.PodRunning || len(c.nodeCalls(v, b)) > 0 {
		t.Fatalf("pod second runs, or the driver saw calls for %s, while the volume is held by %s: %v", b, a, describeCalls(c.nodeCalls(v, b)))
	}

	c.DeletePod("first")
	c.WaitPodRunning("second")
	assertOrder(t, c.nodeCalls(v, a), csidriver.OpNodeUnpublish, csidriver.OpNodeUnstage, csidriver.OpUnpublish)
	assertStartOrder(t, c.nodeCalls(v, b), csidriver.OpPublish, csidriver.OpNodeStage, csidriver.OpNodePublish)
	if unstaged, staged := lastCall(c.nodeCalls(v, a), csidriver.OpNodeUnstage), lastCall(c.nodeCalls(v, b), csidriver.OpNodeStage); !unstaged.Time.Before(staged.Time) {
		t.Errorf("NodeStageVolume on %s at %s, before NodeUnstageVolume on %s at %s", b, staged.Time.Format(time.StampMicro), a, unstaged.Time.Format(time.StampMicro))
	}
	assertNeverOnTwoNodes(t, c.local.Driver.CallsFor(csidriver.OpPublish, v.Handle), c.local.Driver.CallsFor(csidriver.OpUnpublish, v.Handle))
	c.assertNoDetachUnderMount(v)
}

// TestKubeletRestartKeepsMountedVolume kills the kubelet of a node whose pod has a
// volume mounted and starts it again on the same root directory: kubelet rebuilds
// its state from the pod directories, reports the volume in use again, and stages
// and publishes it again at the same paths, without unpublishing or unstaging it
// first; nothing is detached meanwhile and the VolumeAttachment stays the same one.
// The pod's later deletion still unstages before the detach.
func TestKubeletRestartKeepsMountedVolume(t *testing.T) {
	c := newCluster(t, clusterOptions{hollow: true})
	node := c.Nodes[0]
	v := c.RunningVolume("data", "app", node)
	va := c.Attachment(v, node)
	before := c.nodeCalls(v, node)
	staged, published := lastCall(before, csidriver.OpNodeStage), lastCall(before, csidriver.OpNodePublish)
	if staged.StagingPath == "" || published.TargetPath == "" {
		t.Fatalf("pod Running without the volume staged and published: %v", describeCalls(before))
	}

	kubelet := c.local.Hollow[node]
	registrations, _ := kubelet.Plugin.Registrations()
	c.Must(kubelet.Kill())
	restarted := time.Now()
	c.Must(kubelet.Start(t.Context()))
	c.Eventually("kubelet to register the driver again", func() bool {
		n, _ := kubelet.Plugin.Registrations()
		return n > registrations
	})
	t.Logf("driver registered again %s after the kill", time.Since(restarted).Round(time.Millisecond))
	// Two node status periods: time for kubelet to rebuild its volumes and report
	// them. The volume must stay attached and in use all along.
	c.Never(2*hollowStatusPeriod+time.Second, "the volume detached, or not in use, while its pod runs", func() bool {
		now := c.Attachment(v, node)
		attached, inUse, err := c.Workload.InNodeStatus(t.Context(), node, v)
		c.Must(err)
		return now == nil || now.UID != va.UID || now.DeletionTimestamp != nil || !attached || !inUse
	})
	c.WaitPodRunning("app")
	c.Eventually("kubelet to stage and publish the volume again", func() bool {
		return lastIndex(c.nodeCalls(v, node)[len(before):], csidriver.OpNodePublish) >= 0
	})
	after := c.nodeCalls(v, node)[len(before):]
	t.Logf("driver calls after the restart: %v", describeCalls(after))
	assertReconstructed(t, after, staged, published)
	if calls := c.local.Driver.CallsFor(csidriver.OpUnpublish, v.Handle); len(calls) > 0 {
		t.Errorf("ControllerUnpublishVolume across the kubelet restart: %+v", calls)
	}
	if now := c.Attachment(v, node); now == nil || now.UID != va.UID || now.DeletionTimestamp != nil {
		t.Errorf("VolumeAttachment after the kubelet restart %v, want %s (uid %s) kept", now, va.Name, va.UID)
	}

	c.DeletePod("app")
	c.WaitDetached(v, node)
	assertOrder(t, c.nodeCalls(v, node), csidriver.OpNodeUnpublish, csidriver.OpNodeUnstage, csidriver.OpUnpublish)
	c.assertNoDetachUnderMount(v)
}

// assertReconstructed checks the node calls of a volume after kubelet restarted,
// given its staging and publishing before: a NodeStageVolume at the same staging
// path, then a NodePublishVolume to the same target from it, with no
// NodeUnpublishVolume or NodeUnstageVolume before them.
func assertReconstructed(t *testing.T, after []csidriver.Call, staged, published csidriver.Call) {
	t.Helper()
	stage := slices.IndexFunc(after, func(call csidriver.Call) bool {
		return call.Operation == csidriver.OpNodeStage && call.StagingPath == staged.StagingPath
	})
	publish := slices.IndexFunc(after, func(call csidriver.Call) bool {
		return call.Operation == csidriver.OpNodePublish && call.StagingPath == staged.StagingPath && call.TargetPath == published.TargetPath
	})
	if stage < 0 || publish < stage {
		t.Fatalf("want NodeStageVolume at %s, then NodePublishVolume to %s, after the restart; got %v", staged.StagingPath, published.TargetPath, describeCalls(after))
	}
	if i := slices.IndexFunc(after[:publish], func(call csidriver.Call) bool {
		return call.Operation == csidriver.OpNodeUnpublish || call.Operation == csidriver.OpNodeUnstage
	}); i >= 0 {
		t.Errorf("%s after the restart, before kubelet staged and published the volume again: %v", after[i].Operation, describeCalls(after))
	}
}

// TestControllerRestartWhileKubeletsMount kills the controller right after pods with
// volumes are created on two hollow nodes, and starts it again: every pod runs, each
// volume is published on its own node only, staged before mounted, and nothing was
// detached.
func TestControllerRestartWhileKubeletsMount(t *testing.T) {
	c := newCluster(t, clusterOptions{hollow: true})
	var volumes []workload.Volume
	for i, node := range []string{c.Nodes[0], c.Nodes[1], c.Nodes[0], c.Nodes[1]} {
		v := c.CreateVolume(fmt.Sprintf("data-%d", i), workload.VolumeOptions{})
		c.CreatePod(fmt.Sprintf("app-%d", i), node, v.Claim)
		volumes = append(volumes, v)
		if i == 1 {
			c.Must(c.local.Controller.Kill())
		}
	}
	c.Must(c.local.Controller.Start(t.Context()))
	c.Must(c.local.Controller.WaitReady(t.Context()))
	for i, v := range volumes {
		c.WaitPodRunning(fmt.Sprintf("app-%d", i))
		node := c.Nodes[i%2]
		assertStartOrder(t, c.nodeCalls(v, node), csidriver.OpPublish, csidriver.OpNodeStage, csidriver.OpNodePublish)
		// csi-attacher may repeat the idempotent call; every one must be for this node.
		if published := c.local.Driver.PublishedNodes(v.Handle); !slices.Equal(published, []string{c.nodeID(node)}) {
			t.Errorf("%s published on %v, want only %s", v.PV, published, c.nodeID(node))
		}
		if calls := c.local.Driver.CallsFor(csidriver.OpUnpublish, v.Handle); len(calls) > 0 {
			t.Errorf("%s: ControllerUnpublishVolume across the controller restart: %+v", v.PV, calls)
		}
	}
}

// TestKubeletDeadNodeForceDetach stops the kubelet of a node whose pod has a volume
// mounted, as a lost machine would, with kube-controller-manager's node lifecycle
// controller running: the pod is deleted (as pod garbage collection or an operator
// would) and its volume stays in the dead node's last volumesInUse. The node goes
// NotReady a grace period (10 s) later, yet the controller keeps the volume attached
// until --max-wait-for-unmount (20 s) after the pod's deletion, and only then, the
// node NotReady, force-detaches it; the pod made anew on another node then runs.
func TestKubeletDeadNodeForceDetach(t *testing.T) {
	const maxWait = 20 * time.Second
	c := newCluster(t, clusterOptions{
		hollow:                 true,
		nodeMonitorGracePeriod: 10 * time.Second,
		controllerArgs:         []string{"--max-wait-for-unmount=" + maxWait.String()},
	})
	a, b := c.Nodes[0], c.Nodes[1]
	v := c.RunningVolume("data", "first", a)

	c.Must(c.local.Hollow[a].Kill())
	deletionSeen := c.watchAttachmentDeletion(v, a)
	// The wait for unmount cannot begin before the pod's deletion was asked for.
	deleting := time.Now()
	c.DeletePodNow("first")
	c.CreatePod("second", b, v.Claim)
	c.Eventually(a+" NotReady", func() bool { return !c.nodeReady(a) })
	notReady := time.Now()
	// The force detach comes maxWait after the deletion, and kubelet mounts a
	// volume only after a node status write has listed it.
	c.WaitPodRunningWithin("second", maxWait+suite.WaitTimeout)

	forceAt, deleted := deleting.Add(maxWait), deletionSeen()
	detach := lastCall(c.nodeCalls(v, a), csidriver.OpUnpublish)
	t.Logf("pod deleted; node NotReady seen %s later, the VolumeAttachment's deletion %s later, ControllerUnpublishVolume %s later",
		notReady.Sub(deleting).Round(time.Millisecond), deleted.Sub(deleting).Round(time.Millisecond), detach.Time.Sub(deleting).Round(time.Millisecond))
	if !notReady.Before(forceAt) {
		t.Errorf("node %s NotReady seen only at %s, after the max wait for unmount had ended at %s: the case does not show the wait", a, notReady.Format(time.StampMilli), forceAt.Format(time.StampMilli))
	}
	if deleted.IsZero() || deleted.Before(forceAt) || detach.Time.Before(forceAt) {
		t.Errorf("VolumeAttachment's deletion seen at %s, ControllerUnpublishVolume at %s: want both no earlier than the max wait for unmount (%s) after the pod's deletion at %s, although the node was NotReady at %s",
			deleted.Format(time.StampMilli), detach.Time.Format(time.StampMilli), maxWait, deleting.Format(time.StampMilli), notReady.Format(time.StampMilli))
	}
	if !notReady.Before(deleted) || c.nodeReady(a) {
		t.Errorf("node %s NotReady seen at %s, the VolumeAttachment's deletion at %s: want the node NotReady at the force detach and since", a, notReady.Format(time.StampMilli), deleted.Format(time.StampMilli))
	}
	if !detach.StillStaged || slices.ContainsFunc(c.nodeCalls(v, a), func(call csidriver.Call) bool { return call.Operation == csidriver.OpNodeUnstage }) {
		t.Errorf("want the dead node's volume detached while still staged, never unstaged: %v", describeCalls(c.nodeCalls(v, a)))
	}
	assertStartOrder(t, c.nodeCalls(v, b), csidriver.OpPublish, csidriver.OpNodeStage, csidriver.OpNodePublish)
	assertNeverOnTwoNodes(t, c.local.Driver.CallsFor(csidriver.OpPublish, v.Handle), c.local.Driver.CallsFor(csidriver.OpUnpublish, v.Handle))
}

// TestKubeletOutOfServiceTaint stops the kubelet of a node whose pod has a volume
// mounted and deletes the pod: with the default six-minute wait for unmount nothing is
// detached, until the node gets the node.kubernetes.io/out-of-service taint; then the
// volume is detached at once and the pod made anew on another node runs.
func TestKubeletOutOfServiceTaint(t *testing.T) {
	c := newCluster(t, clusterOptions{hollow: true})
	a, b := c.Nodes[0], c.Nodes[1]
	v := c.RunningVolume("data", "first", a)

	c.Must(c.local.Hollow[a].Kill())
	c.DeletePodNow("first")
	c.CreatePod("second", b, v.Claim)
	c.Never(2*hollowStatusPeriod, "the volume detached from the dead node before its taint", func() bool {
		va := c.Attachment(v, a)
		return va == nil || va.DeletionTimestamp != nil
	})

	node, err := c.Client.CoreV1().Nodes().Get(t.Context(), a, metav1.GetOptions{})
	c.Must(err)
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: outOfServiceTaint, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	_, err = c.Client.CoreV1().Nodes().Update(t.Context(), node, metav1.UpdateOptions{})
	c.Must(err)
	tainted := time.Now()
	c.WaitPodRunning("second")
	t.Logf("pod on %s Running %s after the taint", b, time.Since(tainted).Round(time.Millisecond))

	if detach := lastCall(c.nodeCalls(v, a), csidriver.OpUnpublish); detach.Time.Before(tainted) || !detach.StillStaged {
		t.Errorf("ControllerUnpublishVolume from %s %+v, want one after the taint, the volume still staged", a, detach)
	}
	assertNeverOnTwoNodes(t, c.local.Driver.CallsFor(csidriver.OpPublish, v.Handle), c.local.Driver.CallsFor(csidriver.OpUnpublish, v.Handle))
}

// outOfServiceTaint is the taint of non-graceful node shutdown.
const outOfServiceTaint = "node.kubernetes.io/out-of-service"

// nodeReady tells whether a node's Ready condition is True.
func (c *cluster) nodeReady(name string) bool {
	c.T.Helper()
	node, err := c.Client.CoreV1().Nodes().Get(c.T.Context(), name, metav1.GetOptions{})
	c.Must(err)
	return slices.ContainsFunc(node.Status.Conditions, func(cond corev1.NodeCondition) bool {
		return cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue
	})
}

// podPhase returns the phase of a pod of the world.
func (c *cluster) podPhase(name string) corev1.PodPhase {
	c.T.Helper()
	pod, err := c.Client.CoreV1().Pods(c.Namespace).Get(c.T.Context(), name, metav1.GetOptions{})
	c.Must(err)
	return pod.Status.Phase
}
