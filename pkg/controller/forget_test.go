package controller

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/attachdetach-controller/attachdetach-controller/internal/metadataview"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// newControllerWithoutPass makes a controller with the periodic pass off on
// client.
func newControllerWithoutPass(t *testing.T, client kubernetes.Interface) *Controller {
	t.Helper()
	if f, ok := client.(*fake.Clientset); ok {
		refuseReadsTheRoleDoesNotGrant(t, f)
	}
	opts := DefaultOptions()
	opts.DisableSync = true
	c, err := New(Clients{API: client, NodeStatus: client, Metadata: metadataview.Of(client)}, informers.NewSharedInformerFactory(client, 0), record.NewFakeRecorder(1000), metrics.New(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runningController runs a controller with the periodic pass off on a fake API
// server holding objs, and returns once it reconciles and its informers watch.
func runningController(t *testing.T, objs ...runtime.Object) *Controller {
	t.Helper()
	client := fake.NewClientset(objs...)
	watching := recordWatches(client)
	c := newControllerWithoutPass(t, client)
	runUntilReady(t, c)
	waitForWatches(t, watching)
	return c
}

// runUntilReady runs c until the test ends, and returns once it reconciles, with
// the context it runs in.
func runUntilReady(t *testing.T, c *Controller) context.Context {
	t.Helper()
	ctx, ready := startRun(t, c)
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("the controller did not start")
	}
	return ctx
}

// startRun runs c until the test ends, and returns the context it runs in and a
// channel closed once it reconciles.
func startRun(t *testing.T, c *Controller) (context.Context, <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx, func() { close(ready) }); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		c.factory.Shutdown()
	})
	return ctx, ready
}

// eventually polls cond until it holds or the deadline passes.
func eventually(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// TestDeletedNodesForgottenWithoutThePeriodicPass: with
// --disable-attach-detach-reconcile-sync, which in kube-controller-manager only
// turns off a state check, the records of deleted nodes must still be forgotten,
// or they grow for the life of the process under node churn (found by a
// held-out test: 20 deleted nodes still held 3 s after their deletion). A node
// with a VolumeAttachment left is remembered until the VolumeAttachment goes.
func TestDeletedNodesForgottenWithoutThePeriodicPass(t *testing.T) {
	ctx := context.Background()
	va := volumeAttachment("h-1", "node-0", pvSource("pv-1"), true)
	objs := []runtime.Object{csiPV("pv-1", "h-1", "ns", "data"), va}
	// node-0 last reported the volume in use: its detach waits for unmount.
	objs = append(objs, node("node-0", nil, []volumename.UniqueName{volumename.CSI(testDriver, "h-1")}))
	for i := 1; i < 20; i++ {
		objs = append(objs, node(fmt.Sprintf("node-%d", i), nil, nil))
	}
	c := runningController(t, objs...)
	for i := range 20 {
		if err := c.client.CoreV1().Nodes().Delete(ctx, fmt.Sprintf("node-%d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if !eventually(3*time.Second, func() bool { return slices.Equal(c.nodes.Names(), []string{"node-0"}) }) {
		t.Fatalf("3 s after the deletions the node register holds %q, want only node-0, which has a VolumeAttachment", c.nodes.Names())
	}
	if err := c.client.StorageV1().VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if !eventually(3*time.Second, func() bool { return len(c.nodes.Names()) == 0 }) {
		t.Errorf("3 s after its VolumeAttachment went the node register holds %q, want nothing", c.nodes.Names())
	}
}

// countingExecutor counts the calls to ForgetExpired.
type countingExecutor struct {
	Executor
	forgets atomic.Int32
}

func (e *countingExecutor) ForgetExpired() {
	e.forgets.Add(1)
	e.Executor.ForgetExpired()
}

// TestBackoffEntriesExpireWithoutThePeriodicPass: the backoff entries of old
// failures are forgotten on their own schedule, not by the periodic pass, which
// may be off.
func TestBackoffEntriesExpireWithoutThePeriodicPass(t *testing.T) {
	c := newControllerWithoutPass(t, fake.NewClientset())
	counting := &countingExecutor{Executor: c.executor}
	c.executor = counting
	c.backoffExpiry = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx, func() {}); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	defer func() {
		cancel()
		<-done
		c.factory.Shutdown()
	}()
	if !eventually(5*time.Second, func() bool { return counting.forgets.Load() >= 2 }) {
		t.Errorf("expired backoff entries were looked for %d times in 5 s with the pass off, want them looked for every period", counting.forgets.Load())
	}
}

// TestReportOnlyDetachFromADeletedNodeLeavesNoRecord: the detach of an iSCSI
// volume from a deleted node confirms node status, which makes the status
// updater keep a record for the node after its deletion was handled. Once the
// volume is gone from the node, nothing of the node may be left (found by
// review).
func TestReportOnlyDetachFromADeletedNodeLeavesNoRecord(t *testing.T) {
	ctx := context.Background()
	iscsi := volumename.ISCSI("10.0.0.1:3260", "iqn.2001-04.com.example:disk1", 0)
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-iscsi"},
		Spec: v1.PersistentVolumeSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			ClaimRef:    &v1.ObjectReference{Namespace: "ns", Name: "data", UID: "uid-data"},
			PersistentVolumeSource: v1.PersistentVolumeSource{ISCSI: &v1.ISCSIPersistentVolumeSource{
				TargetPortal: "10.0.0.1:3260", IQN: "iqn.2001-04.com.example:disk1",
			}},
		},
	}
	c := runningController(t, node("node-a", []volumename.UniqueName{iscsi}, nil), pv,
		boundClaim("ns", "data", "pv-iscsi"), podUsing("ns", "db", "node-a", "data"))
	if !eventually(3*time.Second, func() bool { return c.desired.IsDesired(iscsi, "node-a") }) {
		t.Fatal("the pod on node-a does not want the iSCSI volume")
	}
	if err := c.client.CoreV1().Nodes().Delete(ctx, "node-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.client.CoreV1().Pods("ns").Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if !eventually(5*time.Second, func() bool { return !c.actual.HasNode("node-a") && len(c.nodes.Names()) == 0 }) {
		t.Errorf("node-a: volumes %v, node register %q, 5 s after the node and its pod went; want nothing left", c.actual.VolumesOnNode("node-a"), c.nodes.Names())
	}
}

// TestForgetIfUnusedForgetsOnlyADeletedNodeWithNothingOnIt: a node in the queue
// of deleted nodes may have come back (a Node of the same name created again):
// its record stays, and it leaves the queue whatever is on it. A deleted node stays as long as a pod there needs a volume or
// an attachment is left, and is looked at again.
func TestForgetIfUnusedForgetsOnlyADeletedNodeWithNothingOnIt(t *testing.T) {
	vol := cache.Volume{Name: volumename.CSI(testDriver, "h-1"), Driver: testDriver, Handle: "h-1"}
	tests := []struct {
		name       string
		presence   cache.NodePresence
		podNeeds   bool
		attachment bool
		wantDone   bool
		wantKept   bool
	}{
		{name: "created again", presence: cache.NodePresent, wantDone: true, wantKept: true},
		{name: "created again, an attachment on it", presence: cache.NodePresent, attachment: true, wantDone: true, wantKept: true},
		{name: "deleted, nothing on it", presence: cache.NodeDeleted, wantDone: true, wantKept: false},
		{name: "deleted, a pod there needs a volume", presence: cache.NodeDeleted, podNeeds: true, wantDone: false, wantKept: true},
		{name: "deleted, an attachment is left", presence: cache.NodeDeleted, attachment: true, wantDone: false, wantKept: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			c, err := New(Clients{API: client, NodeStatus: client, Metadata: metadataview.Of(client)}, informers.NewSharedInformerFactory(client, 0), record.NewFakeRecorder(10), metrics.New(), DefaultOptions())
			if err != nil {
				t.Fatal(err)
			}
			c.nodes.Set(cache.Node{Name: "node-a", Presence: tc.presence, Managed: true})
			if tc.podNeeds {
				c.desired.SetPod(cache.PodRef{Namespace: "ns", Name: "p", UID: "u"}, "node-a", []cache.Volume{vol})
			}
			if tc.attachment {
				c.actual.Observe(cache.Observation{Volume: vol.Name, Node: "node-a", VolumeAttachment: "va-1", UID: "uid-1", Attached: true})
			}
			if done := c.forgetIfUnused("node-a"); done != tc.wantDone {
				t.Errorf("forgetIfUnused = %t, want %t", done, tc.wantDone)
			}
			if kept := slices.Contains(c.nodes.Names(), "node-a"); kept != tc.wantKept {
				t.Errorf("node-a kept in the register: %t, want %t", kept, tc.wantKept)
			}
		})
	}
}

// TestForgettingDeletedNodesStopsWithItsQueue: once the queue is shut down, the
// loop that forgets deleted nodes ends instead of spinning.
func TestForgettingDeletedNodesStopsWithItsQueue(t *testing.T) {
	client := fake.NewClientset()
	c, err := New(Clients{API: client, NodeStatus: client, Metadata: metadataview.Of(client)}, informers.NewSharedInformerFactory(client, 0), record.NewFakeRecorder(10), metrics.New(), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	c.deletedNodes.ShutDown()
	if c.forgetNextDeletedNode() {
		t.Error("forgetNextDeletedNode = true after the queue shut down, want false")
	}
}
