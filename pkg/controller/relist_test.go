package controller

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/attachments"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/reconciler"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// vaWatches makes the VolumeAttachment watches of client fake ones that deliver
// nothing unless told, and the lists of VolumeAttachments fail while failing is
// set.
type vaWatches struct {
	mu      sync.Mutex
	current *watch.FakeWatcher
	failing atomic.Bool
	failed  atomic.Int32
	// hidden names a VolumeAttachment the informer's lists leave out; quorum
	// lists show it.
	hidden atomic.Pointer[string]
}

func newVAWatches(client *fake.Clientset) *vaWatches {
	w := &vaWatches{}
	client.PrependWatchReactor("volumeattachments", func(clienttesting.Action) (bool, watch.Interface, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.current = watch.NewFake()
		return true, w.current, nil
	})
	client.PrependReactor("list", "volumeattachments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if w.failing.Load() {
			w.failed.Add(1)
			return true, nil, apierrors.NewTooManyRequests("throttled", 1)
		}
		hidden := w.hidden.Load()
		if hidden == nil || a.(clienttesting.ListActionImpl).GetListOptions().ResourceVersion == "" {
			return false, nil, nil
		}
		obj, err := client.Tracker().List(vaResource, vaKind, "")
		if err != nil {
			return true, nil, err
		}
		list := obj.(*storagev1.VolumeAttachmentList)
		list.Items = slices.DeleteFunc(list.Items, func(va storagev1.VolumeAttachment) bool { return va.Name == *hidden })
		// A list without the object is one of a moment before it was made:
		// its resourceVersion is older than the present's.
		rv, err := strconv.ParseInt(list.ResourceVersion, 10, 64)
		if err != nil {
			return true, nil, err
		}
		list.ResourceVersion = strconv.FormatInt(rv-1, 10)
		return true, list, nil
	})
	return w
}

var (
	vaResource = storagev1.SchemeGroupVersion.WithResource("volumeattachments")
	vaKind     = storagev1.SchemeGroupVersion.WithKind("VolumeAttachment")
)

// expire ends the running watch with 410 Gone, as when the API server's window
// has moved past it.
func (w *vaWatches) expire() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.current == nil {
		return false
	}
	w.current.Error(&apierrors.NewResourceExpired("too old resource version").ErrStatus)
	w.current = nil
	return true
}

// TestNoSingleAttachAttachWhileTheInformerCannotList: the VolumeAttachment
// informer's watch expired and its lists then failed; meanwhile another tool
// made a VolumeAttachment of an RWO volume on node-b, which the informer did not
// show. A pod on node-a then needed the volume. The controller attached it to
// node-a while node-b held it (simulation seed 1064). While a list of the
// informer has failed, no single-attach attach may start until every
// VolumeAttachment that exists is known again; then node-b's holds the volume.
func TestNoSingleAttachAttachWhileTheInformerCannotList(t *testing.T) {
	pv := csiPV("pv-1", "vol-1", "ns", "claim-1", v1.ReadWriteOnce)
	client := fake.NewClientset(node("node-a", nil, nil), node("node-b", nil, nil), pv, boundClaim("ns", "claim-1", "pv-1"))
	watches := newVAWatches(client)
	c := newControllerWithoutPass(t, client)
	ctx := runUntilReady(t, c)

	watches.failing.Store(true)
	if !eventually(10*time.Second, watches.expire) {
		t.Fatal("the VolumeAttachment informer never watched")
	}
	if !eventually(10*time.Second, func() bool { return watches.failed.Load() > 0 }) {
		t.Fatal("the VolumeAttachment informer did not list again")
	}
	held := volumeAttachment("vol-1", "node-b", pvSource("pv-1"), true)
	held.Name, held.UID = "copy-on-node-b", "uid-copy-on-node-b"
	if err := client.Tracker().Add(held); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods("ns").Create(ctx, podUsing("ns", "pod-1", "node-a", "claim-1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	vol := volumename.CSI(testDriver, "vol-1")
	decisionOnA := func() reconciler.Decision { return liveDecision(c, vol, "node-a") }
	if !eventually(10*time.Second, func() bool {
		d := decisionOnA()
		return d.Action == reconciler.ActionWait && strings.Contains(d.Reason(), "stopped watching")
	}) {
		t.Fatalf("while the informer cannot list, node-a's decision is %+v, want a wait for every VolumeAttachment to be known", decisionOnA())
	}

	watches.failing.Store(false)
	if !eventually(20*time.Second, func() bool {
		d := decisionOnA()
		return d.Action == reconciler.ActionWait && len(d.HeldBy) == 1 && d.HeldBy[0] == "node-b"
	}) {
		t.Fatalf("once the informer lists again, node-a's decision is %+v, want a wait for node-b to release the volume", decisionOnA())
	}
	for _, a := range client.Actions() {
		if create, ok := a.(clienttesting.CreateAction); ok && a.GetResource().Resource == "volumeattachments" {
			if va := create.GetObject().(*storagev1.VolumeAttachment); va.Spec.NodeName == "node-a" {
				t.Errorf("the controller created %s on node-a while node-b held the volume", va.Name)
			}
		}
	}
}

// TestTheProofWaitsForWhatAQuorumListShows: the informer watches again, but its
// list has not shown another tool's VolumeAttachment on node-b that a quorum list
// shows (a list served from a cache behind etcd). Single-attach attaches wait
// until the informer shows it; a lapse meanwhile starts the proof again.
func TestTheProofWaitsForWhatAQuorumListShows(t *testing.T) {
	pv := csiPV("pv-1", "vol-1", "ns", "claim-1", v1.ReadWriteOnce)
	client := fake.NewClientset(node("node-a", nil, nil), node("node-b", nil, nil), pv, boundClaim("ns", "claim-1", "pv-1"))
	watches := newVAWatches(client)
	c := newControllerWithoutPass(t, client)
	ctx := runUntilReady(t, c)

	held := volumeAttachment("vol-1", "node-b", pvSource("pv-1"), true)
	held.Name, held.UID = "copy-on-node-b", "uid-copy-on-node-b"
	watches.hidden.Store(&held.Name)
	if err := client.Tracker().Add(held); err != nil {
		t.Fatal(err)
	}
	if !eventually(10*time.Second, watches.expire) {
		t.Fatal("the VolumeAttachment informer never watched")
	}
	// The copy, hidden from the informer, stands for one made while it was not
	// watching: a pod needs the volume only once the controller has seen the
	// watch end.
	if !eventually(10*time.Second, func() bool { return c.actual.Incomplete() != "" }) {
		t.Fatal("the end of the VolumeAttachment informer's watch did not make the actual state incomplete")
	}
	if _, err := client.CoreV1().Pods("ns").Create(ctx, podUsing("ns", "pod-1", "node-a", "claim-1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vol := volumename.CSI(testDriver, "vol-1")
	decisionOnA := func() reconciler.Decision { return liveDecision(c, vol, "node-a") }
	waits := func() bool {
		d := decisionOnA()
		return d.Action == reconciler.ActionWait && strings.Contains(d.Reason(), "stopped watching")
	}
	// The informer lists again and watches: wait for its second watch, then end
	// it too, during the proof.
	if !eventually(10*time.Second, func() bool { return waits() && watches.expire() }) {
		t.Fatalf("while the informer has not shown what exists, node-a's decision is %+v, want a wait", decisionOnA())
	}
	if !eventually(10*time.Second, func() bool {
		watches.mu.Lock()
		defer watches.mu.Unlock()
		return watches.current != nil
	}) {
		t.Fatal("the VolumeAttachment informer did not watch again")
	}
	time.Sleep(time.Second)
	if !waits() {
		t.Fatalf("a second after the informer watched again without showing what exists, node-a's decision is %+v, want a wait", decisionOnA())
	}

	watches.hidden.Store(nil)
	if !eventually(10*time.Second, watches.expire) {
		t.Fatal("the VolumeAttachment informer stopped watching")
	}
	if !eventually(20*time.Second, func() bool {
		d := decisionOnA()
		return d.Action == reconciler.ActionWait && len(d.HeldBy) == 1 && d.HeldBy[0] == "node-b"
	}) {
		t.Fatalf("once the informer shows what exists, node-a's decision is %+v, want a wait for node-b to release the volume", decisionOnA())
	}
	for _, a := range client.Actions() {
		create, ok := a.(clienttesting.CreateAction)
		if !ok || a.GetResource().Resource != "volumeattachments" {
			continue
		}
		if name := create.GetObject().(*storagev1.VolumeAttachment).Name; name != attachments.CacheProbe {
			t.Errorf("the controller created %s while node-b held the volume", name)
		}
	}
}

// liveDecision returns what the running controller decides about the volume on
// the node, as explain shows it (empty when it decides nothing there).
func liveDecision(c *Controller, vol volumename.UniqueName, node string) reconciler.Decision {
	for _, d := range c.reconciler.Explain(vol, true) {
		if d.Node == node {
			return d
		}
	}
	return reconciler.Decision{}
}

// TestTheStartUpCheckProvesEveryVolumeAttachmentKnown: the VolumeAttachment
// informer's first list failed, a lapse, and its next list, a quorum read sent
// after that lapse and since the controller leads, passed the start-up check.
// That read is also the proof that every VolumeAttachment is known: the state
// rebuilt from the cache records every object it returned. Single-attach
// attaches need not wait for a second list of every VolumeAttachment (half a
// second at 10,000) after the first decision.
func TestTheStartUpCheckProvesEveryVolumeAttachmentKnown(t *testing.T) {
	client := fake.NewClientset(node("node-a", nil, nil), volumeAttachment("vol-1", "node-a", pvSource("pv-1"), true))
	var lists atomic.Int32
	client.PrependReactor("list", "volumeattachments", func(clienttesting.Action) (bool, runtime.Object, error) {
		if lists.Add(1) == 1 {
			return true, nil, apierrors.NewTooManyRequests("throttled", 1)
		}
		return false, nil, nil
	})
	c := newControllerWithoutPass(t, client)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	incomplete := make(chan string, 1)
	go func() {
		done <- c.Run(ctx, func() { incomplete <- c.actual.Incomplete() })
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		c.factory.Shutdown()
	})
	select {
	case reason := <-incomplete:
		if reason != "" {
			t.Errorf("at the first decision the state is incomplete (%q), want it proven by the start-up check", reason)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the controller did not start")
	}
	if n := fullLists(client, "volumeattachments"); n != 2 {
		t.Errorf("VolumeAttachments listed %d times, want twice: the informer's failed list and its next", n)
	}
}
