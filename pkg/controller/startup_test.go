package controller

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/attachdetach-controller/attachdetach-controller/internal/metadataview"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/interleave"
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
	// The informer's list, a standby's before it led, found the old nodes, and
	// its watch delivers the new ones only later; a quorum list reads the new
	// ones.
	var lists atomic.Int32
	client.PrependReactor("list", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
		if lists.Add(1) == 1 {
			return true, informed.DeepCopy(), nil
		}
		return false, nil, nil
	})
	presentVersionIs(client, "nodes", "8")
	watcher := watch.NewRaceFreeFake()
	client.PrependWatchReactor("nodes", clienttesting.DefaultWatchReactor(watcher, nil))
	go func() {
		time.Sleep(500 * time.Millisecond)
		for _, n := range current {
			watcher.Modify(n.DeepCopy())
		}
	}()

	c := standbyControllerWithoutPass(t, client)
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

// TestStartUpWaitsForWhatAPodNeedsItsVolumeThrough: the wait for unmount before a
// force detach counts from the moment no pod on the node needs the volume, and a
// pod needs it through its claim and the PersistentVolume the claim is bound to.
// A new leader's informer lists a past (resourceVersion "0", from the API
// server's cache, or a standby's list from before it led) in which the pod, or
// its claim, does not exist yet, or the claim is not bound yet, or the
// PersistentVolume does not exist yet; its watch shows the present only later.
// Had the controller decided from those informers, no pod would have needed the
// volume, and the wait for unmount would have begun while the pod still ran:
// seed 22519 (the pod: an FC volume listed on a second node while the first,
// deleted, still had it mounted) and seed 94706 (the PersistentVolume: vol-2
// force-detached from a deleted node 21 s after its last pod went, with a 30 s
// wait). It must first wait for the pod informer to hold every pod at least as a
// quorum read shows it, and, where the caches cannot follow a claim of a pod on
// a node to its PersistentVolume, see that a quorum read cannot either.
func TestStartUpWaitsForWhatAPodNeedsItsVolumeThrough(t *testing.T) {
	pod := podUsing("ns", "pod-1", "node-a", "claim-1")
	pod.ResourceVersion = "7"
	pv := csiPV("pv-1", "h-1", "ns", "claim-1", v1.ReadWriteOnce)
	pv.ResourceVersion = "7"
	claim := boundClaim("ns", "claim-1", "pv-1")
	claim.ResourceVersion = "6"
	unbound := claim.DeepCopy()
	unbound.ResourceVersion = "3"
	unbound.Spec.VolumeName = ""
	unbound.Status.Phase = v1.ClaimPending
	tests := []struct {
		name     string
		resource string
		empty    runtime.Object
		// informed is what the informer's own list holds; present is what the
		// API server holds, which the informer's watch delivers only later.
		informed, present runtime.Object
	}{
		{name: "the pod informer lacks the pod", resource: "pods", empty: &v1.PodList{}, present: pod},
		{name: "the PersistentVolume informer lacks the PersistentVolume", resource: "persistentvolumes", empty: &v1.PersistentVolumeList{}, present: pv},
		{name: "the claim informer lacks the claim", resource: "persistentvolumeclaims", empty: &v1.PersistentVolumeClaimList{}, present: claim},
		{name: "the claim informer holds the claim before it was bound", resource: "persistentvolumeclaims", empty: &v1.PersistentVolumeClaimList{},
			informed: unbound, present: claim},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vol := volumename.CSI(testDriver, "h-1")
			client := fake.NewClientset(node("node-a", nil, nil), pod, pv, claim)
			listOf := func(rv string, obj runtime.Object) runtime.Object {
				list := tc.empty.DeepCopyObject()
				var items []runtime.Object
				if obj != nil {
					items = append(items, obj.DeepCopyObject())
				}
				if err := meta.SetList(list, items); err != nil {
					t.Fatal(err)
				}
				lm, _ := meta.ListAccessor(list)
				lm.SetResourceVersion(rv)
				return list
			}
			// The informer's list found the past, and its watch delivers the
			// present only later; every later list is a quorum read of the
			// present.
			var lists atomic.Int32
			client.PrependReactor("list", tc.resource, func(clienttesting.Action) (bool, runtime.Object, error) {
				if lists.Add(1) == 1 {
					return true, listOf("5", tc.informed), nil
				}
				return true, listOf("7", tc.present), nil
			})
			watcher := watch.NewRaceFreeFake()
			client.PrependWatchReactor(tc.resource, clienttesting.DefaultWatchReactor(watcher, nil))
			go func() {
				time.Sleep(500 * time.Millisecond)
				if tc.informed != nil {
					watcher.Modify(tc.present.DeepCopyObject())
				} else {
					watcher.Add(tc.present.DeepCopyObject())
				}
			}()

			c := standbyControllerWithoutPass(t, client)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			t.Cleanup(c.factory.Shutdown)
			desired := false
			err := c.Run(ctx, func() {
				desired = c.desired.IsDesired(vol, "node-a")
				cancel()
			})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if !desired {
				t.Errorf("at the first decision no pod on node-a needs %s; the API server has pod-1 there needing it through claim-1 and pv-1", vol)
			}
		})
	}
}

// TestStartUpDoesNotWaitForAPodDeletedAfterTheQuorumList: pods come and go all
// the time, so a pod of the quorum list may be deleted before the informer is
// looked at, and the informer never holds it. A listed pod the informer lacks is
// read again: one the API server no longer has does not hold up the start. It is
// read by a list, as the controller's role grants list and watch on pods but not
// get (found by the deploy suite in CI).
func TestStartUpDoesNotWaitForAPodDeletedAfterTheQuorumList(t *testing.T) {
	gone := podUsing("ns", "gone", "node-a", "claim-1")
	gone.ResourceVersion = "8"
	client := fake.NewClientset(node("node-a", nil, nil))
	var lists atomic.Int32
	client.PrependReactor("list", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		switch {
		case lists.Add(1) == 1:
			// The informer's list, a standby's before it led.
			return true, &v1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "5"}}, nil
		case a.(clienttesting.ListActionImpl).GetListOptions().FieldSelector != "":
			// The pod read again, by name.
			return false, nil, nil
		}
		return true, &v1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "9"}, Items: []v1.Pod{*gone.DeepCopy()}}, nil
	})

	c := standbyControllerWithoutPass(t, client)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t.Cleanup(c.factory.Shutdown)
	ready := false
	if err := c.Run(ctx, func() {
		ready = true
		cancel()
	}); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v", err)
	}
	if !ready {
		t.Error("the controller never became ready: it waited for a pod deleted after the quorum list")
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
		{"pods", func(c *Controller) bool {
			_, err := c.informers.pods.Lister().Pods("ns").Get("pod-1")
			return err == nil
		}},
	}
	for _, tc := range tests {
		t.Run(tc.resource, func(t *testing.T) {
			va := volumeAttachment("h-1", "node-a", pvSource("pv-1"), true)
			current := node("node-a", nil, nil)
			current.ResourceVersion = "7"
			pod := podUsing("ns", "pod-1", "node-a", "claim-1")
			client := fake.NewClientset(current, va, pod)
			informed := map[string]runtime.Object{
				"volumeattachments": &storagev1.VolumeAttachmentList{},
				"nodes":             &v1.NodeList{Items: []v1.Node{*node("node-a", nil, nil)}},
				"pods":              &v1.PodList{},
			}
			informed["nodes"].(*v1.NodeList).Items[0].ResourceVersion = "5"
			// The informers' lists, a standby's before it led, find nothing new.
			var lists, failures atomic.Int32
			client.PrependReactor("list", tc.resource, func(a clienttesting.Action) (bool, runtime.Object, error) {
				if lists.Add(1) == 1 {
					return true, informed[tc.resource].DeepCopyObject(), nil
				}
				if failures.Add(1) <= 3 {
					return true, nil, errors.New("etcdserver: request timed out")
				}
				return false, nil, nil
			})
			watcher := watch.NewRaceFreeFake()
			client.PrependWatchReactor(tc.resource, clienttesting.DefaultWatchReactor(watcher, nil))
			go func() {
				time.Sleep(500 * time.Millisecond)
				switch tc.resource {
				case "nodes":
					watcher.Modify(current.DeepCopy())
				case "pods":
					watcher.Add(pod.DeepCopy())
				default:
					watcher.Add(va.DeepCopy())
				}
			}()

			c := standbyControllerWithoutPass(t, client)
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
	// The informer's list, a standby's before it led, found the old object.
	var lists atomic.Int32
	client.PrependReactor("list", "volumeattachments", func(clienttesting.Action) (bool, runtime.Object, error) {
		if lists.Add(1) == 1 {
			return true, &storagev1.VolumeAttachmentList{Items: []storagev1.VolumeAttachment{*old.DeepCopy()}}, nil
		}
		return false, nil, nil
	})
	watcher := watch.NewRaceFreeFake()
	client.PrependWatchReactor("volumeattachments", clienttesting.DefaultWatchReactor(watcher, nil))
	go func() {
		time.Sleep(500 * time.Millisecond)
		watcher.Delete(old.DeepCopy())
		watcher.Add(current.DeepCopy())
	}()

	c := standbyControllerWithoutPass(t, client)
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

// TestStartUpWaitsForTheVolumeAttachmentInformer: the previous leader deleted
// the VolumeAttachment of an RWO volume on node-a and created it again under the
// same name, for a pod back on node-a. The new leader's informer listed, as a
// standby before it led, the old object, being deleted, and its watch delivers the
// deletion and the new object only later. An informer that holds an object of
// the listed name is not current: had the controller decided then, it would have
// learned of the deletion, counted the volume free, and attached it to another
// node while node-a had it (simulation seeds 5604, 28346, 28588, 30975, 39414).
// It must wait until the informer holds every VolumeAttachment as the same
// object, at least at the version a quorum read shows. The state is filled
// while this check runs, so the first decision must also wait for the event
// handlers to record what the informer then holds: each case runs again with
// the handler slow to record the informer's later events.
func TestStartUpWaitsForTheVolumeAttachmentInformer(t *testing.T) {
	deleted := metav1.Now()
	at := func(uid, rv string, deleting bool) *storagev1.VolumeAttachment {
		va := volumeAttachment("h-1", "node-a", pvSource("pv-1"), true)
		va.UID, va.ResourceVersion = types.UID(uid), rv
		if deleting {
			va.DeletionTimestamp = &deleted
		}
		return va
	}
	tests := []struct {
		name string
		// informed is the object as the informer first lists it, current as the
		// API server has it.
		informed, current *storagev1.VolumeAttachment
		// deliver brings the informer up to date.
		deliver func(w *watch.RaceFreeFakeWatcher, informed, current *storagev1.VolumeAttachment)
	}{
		{
			name:     "an older object of the same name, being deleted",
			informed: at("uid-old", "4", true),
			current:  at("uid-new", "9", false),
			deliver: func(w *watch.RaceFreeFakeWatcher, informed, current *storagev1.VolumeAttachment) {
				w.Delete(informed)
				w.Add(current)
			},
		},
		{
			name:     "the same object at an older version",
			informed: at("uid-1", "4", false),
			current:  at("uid-1", "9", true),
			deliver: func(w *watch.RaceFreeFakeWatcher, _, current *storagev1.VolumeAttachment) {
				w.Modify(current)
			},
		},
	}
	for _, tc := range tests {
		for _, slow := range []bool{false, true} {
			name := tc.name
			if slow {
				name += ", handler slow"
			}
			t.Run(name, func(t *testing.T) {
				runWaitsForTheVolumeAttachmentInformer(t, tc.informed, tc.current, tc.deliver, slow)
			})
		}
	}
}

// slowAfterFirst is an interleave.Scheduler that holds each event of the object
// id after its first for a second.
type slowAfterFirst struct {
	id   string
	seen atomic.Int32
}

func (s *slowAfterFirst) At(point, id string) {
	if point == "event" && id == s.id && s.seen.Add(1) > 1 {
		time.Sleep(time.Second)
	}
}

// runWaitsForTheVolumeAttachmentInformer runs one case of
// TestStartUpWaitsForTheVolumeAttachmentInformer: the informer lists informed,
// deliver brings it to current half a second later, and slow makes the event
// handler hold each of the object's events after the first for a second.
func runWaitsForTheVolumeAttachmentInformer(t *testing.T, informed, current *storagev1.VolumeAttachment, deliver func(w *watch.RaceFreeFakeWatcher, informed, current *storagev1.VolumeAttachment), slow bool) {
	client := fake.NewClientset(node("node-a", nil, nil), csiPV("pv-1", "h-1", "ns", "claim-1"), current.DeepCopy())
	// The informer's list, a standby's before it led, found the old object.
	var lists atomic.Int32
	client.PrependReactor("list", "volumeattachments", func(clienttesting.Action) (bool, runtime.Object, error) {
		if lists.Add(1) == 1 {
			list := &storagev1.VolumeAttachmentList{Items: []storagev1.VolumeAttachment{*informed.DeepCopy()}}
			list.ResourceVersion = "4"
			return true, list, nil
		}
		return false, nil, nil
	})
	presentVersionIs(client, "volumeattachments", current.ResourceVersion)
	watcher := watch.NewRaceFreeFake()
	client.PrependWatchReactor("volumeattachments", clienttesting.DefaultWatchReactor(watcher, nil))
	go func() {
		time.Sleep(500 * time.Millisecond)
		deliver(watcher, informed.DeepCopy(), current.DeepCopy())
	}()

	c := standbyControllerWithoutPass(t, client)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if slow {
		ctx = interleave.WithScheduler(ctx, &slowAfterFirst{id: "*v1.VolumeAttachment " + current.Name})
	}
	t.Cleanup(c.factory.Shutdown)
	var held cache.Attachment
	var ok bool
	err := c.Run(ctx, func() {
		held, ok = c.actual.Object(current.Name)
		cancel()
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	wantDeleting := current.DeletionTimestamp != nil
	if !ok || held.UID != current.UID || held.Deleting != wantDeleting {
		t.Errorf("at the first decision the controller holds UID %q deleting %t (recorded: %t), want the object as the API server has it: UID %q deleting %t",
			held.UID, held.Deleting, ok, current.UID, wantDeleting)
	}
}

// standbyControllerWithoutPass is newControllerWithoutPass made as a standby is:
// its informers listed, and are synced, before it leads.
func standbyControllerWithoutPass(t *testing.T, client kubernetes.Interface) *Controller {
	t.Helper()
	if f, ok := client.(*fake.Clientset); ok {
		refuseReadsTheRoleDoesNotGrant(t, f)
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	if err := StartInformers(t.Context(), factory); err != nil {
		t.Fatal(err)
	}
	factory.WaitForCacheSync(t.Context().Done())
	opts := DefaultOptions()
	opts.DisableSync = true
	c, err := New(Clients{API: client, NodeStatus: client, Metadata: metadataview.Of(client)}, factory, record.NewFakeRecorder(1000), metrics.New(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestStartUpTakesTheInformersOwnListAsProof: the VolumeAttachment, node and
// pod informers' own lists prove them current when they were quorum reads sent
// once the controller led; a list sent before (a standby's), or one that
// returned an object deleted since, needs a quorum list of the controller's own.
// With 10,000 pods, the second list of every pod was most of the start-up.
func TestStartUpTakesTheInformersOwnListAsProof(t *testing.T) {
	va := volumeAttachment("h-1", "node-a", pvSource("pv-1"), true)
	pod := podUsing("ns", "pod-1", "node-a", "claim-1")
	objects := []struct {
		resource string
		// logKey is the key of the informer's proof in the check's log line.
		logKey string
		obj    runtime.Object
		delete func(ctx context.Context, client kubernetes.Interface) error
		held   func(c *Controller) bool
	}{
		{"volumeattachments", "attachments", va,
			func(ctx context.Context, client kubernetes.Interface) error {
				return client.StorageV1().VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{})
			},
			func(c *Controller) bool { _, err := c.informers.attachments.Lister().Get(va.Name); return err == nil }},
		{"nodes", "nodes", node("node-a", nil, nil),
			func(ctx context.Context, client kubernetes.Interface) error {
				return client.CoreV1().Nodes().Delete(ctx, "node-a", metav1.DeleteOptions{})
			},
			func(c *Controller) bool { _, err := c.informers.nodes.Lister().Get("node-a"); return err == nil }},
		{"pods", "pods", pod,
			func(ctx context.Context, client kubernetes.Interface) error {
				return client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{})
			},
			func(c *Controller) bool {
				_, err := c.informers.pods.Lister().Pods(pod.Namespace).Get(pod.Name)
				return err == nil
			}},
	}
	tests := []struct {
		name string
		// standby: the informers listed before the controller was made.
		standby bool
		// deletedSince: the object the informer listed is deleted before the check.
		deletedSince bool
		// listsFail: every list of all objects after the informer's fails, so
		// that the check can pass only by the cache (one may be sent, and
		// called off).
		listsFail bool
		wantLists int
		// wantProof is what the log line says proved the cache current.
		wantProof string
	}{
		{name: "informer listed once the controller led", wantLists: 1, wantProof: "its own list"},
		{name: "informer listed before, as a standby's, and applied every change up to the present", standby: true, listsFail: true, wantProof: "its cache at the present"},
		{name: "an object of its list deleted since", deletedSince: true, wantLists: 2, wantProof: "a quorum list"},
	}
	for _, o := range objects {
		for _, tc := range tests {
			t.Run(o.resource+"/"+tc.name, func(t *testing.T) {
				logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
				ctx := klog.NewContext(t.Context(), logger)
				client := fake.NewClientset(o.obj.DeepCopyObject())
				refuseReadsTheRoleDoesNotGrant(t, client)
				watching := recordWatches(client)
				factory := informers.NewSharedInformerFactory(client, 0)
				if tc.standby {
					if err := StartInformers(ctx, factory); err != nil {
						t.Fatal(err)
					}
					factory.WaitForCacheSync(ctx.Done())
				}
				c, err := New(Clients{API: client, NodeStatus: client, Metadata: metadataview.Of(client)}, factory, record.NewFakeRecorder(100), metrics.New(), DefaultOptions())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(factory.Shutdown)
				factory.Start(ctx.Done())
				factory.WaitForCacheSync(ctx.Done())
				if tc.deletedSince {
					waitForWatches(t, watching)
					if err := o.delete(ctx, client); err != nil {
						t.Fatal(err)
					}
					for o.held(c) {
						time.Sleep(time.Millisecond)
					}
				}
				if tc.standby {
					// The cache probe is refused, so that the present's
					// resourceVersion proves a VolumeAttachment informer current
					// (see TestStartUpProvesAStandbysAttachmentsByTheCacheProbe).
					stampCreatedAttachments(client, true)
				}
				if tc.listsFail {
					client.PrependReactor("list", o.resource, func(a clienttesting.Action) (bool, runtime.Object, error) {
						if a.(clienttesting.ListActionImpl).GetListOptions().Limit == 1 {
							return false, nil, nil
						}
						return true, nil, errors.New("etcdserver: request timed out")
					})
				}
				waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				if err := c.waitForCurrentInformers(waitCtx); err != nil {
					t.Fatal(err)
				}
				if lists := fullLists(client, o.resource); !tc.listsFail && lists != tc.wantLists {
					t.Errorf("%s listed %d times, want %d", o.resource, lists, tc.wantLists)
				}
				logged := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
				if want := o.logKey + `="` + tc.wantProof + " after "; !strings.Contains(logged, "Informers hold the present") || !strings.Contains(logged, want) {
					t.Errorf("the check's log line does not say %s; the log:\n%s", want, logged)
				}
			})
		}
	}
}

// presentVersionIs makes client answer a list of one object of the resource, the
// start-up check's read of the present, with resourceVersion rv: the fake's own
// counter knows nothing of the versions a test gives its objects.
func presentVersionIs(client *fake.Clientset, resource, rv string) {
	client.PrependReactor("list", resource, func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.(clienttesting.ListActionImpl).GetListOptions().Limit != 1 {
			return false, nil, nil
		}
		meta := metav1.ListMeta{ResourceVersion: rv}
		switch resource {
		case "nodes":
			return true, &v1.NodeList{ListMeta: meta}, nil
		case "pods":
			return true, &v1.PodList{ListMeta: meta}, nil
		default:
			return true, &storagev1.VolumeAttachmentList{ListMeta: meta}, nil
		}
	})
}

// waitForCurrentInformers runs the whole start-up check, as Run does in two
// steps around filling the state: every informer proven current, then the
// claims of pods.
func (c *Controller) waitForCurrentInformers(ctx context.Context) error {
	check := c.startCheck(ctx)
	if err := check.wait(ctx); err != nil {
		return err
	}
	if err := c.waitForClaimsOfPods(ctx); err != nil {
		return err
	}
	check.report(ctx)
	return nil
}
