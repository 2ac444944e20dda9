package controller

import (
	"context"
	"slices"
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/attachdetach-controller/attachdetach-controller/internal/metadataview"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// TestRebuildFailsWhenItsEventHandlersCannotBeRegistered: informers that stopped
// take no event handler; rebuilding the state without them would leave the
// controller deciding on what it never hears about again.
func TestRebuildFailsWhenItsEventHandlersCannotBeRegistered(t *testing.T) {
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	c, err := New(Clients{API: client, NodeStatus: client, Metadata: metadataview.Of(client)}, factory, record.NewFakeRecorder(10), metrics.New(), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	cancel()
	factory.Shutdown()
	if _, err := c.rebuild(context.Background()); err == nil {
		t.Error("rebuild with stopped informers succeeded, want an error")
	}
}

// TestRebuildEvaluatesEachPodOnce: every pod the informer holds is delivered to
// its handler and evaluated from caches that hold every claim, PersistentVolume
// and CSIDriver already. Delivering those too must not evaluate their pods again:
// at 50,000 pods the rebuild made 69,592 evaluations.
func TestRebuildEvaluatesEachPodOnce(t *testing.T) {
	const pods = 300
	objs := []runtime.Object{&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: testDriver}}}
	var want []volumename.UniqueName
	for i := range pods {
		n := strconv.Itoa(i)
		objs = append(objs, podUsing("ns", "pod-"+n, "node-a", "claim-"+n), boundClaim("ns", "claim-"+n, "pv-"+n),
			csiPV("pv-"+n, "h-"+n, "ns", "claim-"+n, v1.ReadWriteOnce))
		want = append(want, volumename.CSI(testDriver, "h-"+n))
	}
	c := startedController(t, objs...)
	evaluated, err := c.rebuild(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if evaluated != pods {
		t.Errorf("the rebuild made %d pod evaluations, want one per pod: %d", evaluated, pods)
	}
	for _, v := range want {
		if !c.desired.IsDesired(v, "node-a") {
			t.Errorf("%s is not desired on node-a after the rebuild", v)
		}
	}
}

// settlingExecutor records the attachments it is asked to settle.
type settlingExecutor struct {
	Executor
	settled []string
}

func (e *settlingExecutor) Settle(_ context.Context, att cache.Attachment) {
	e.settled = append(e.settled, att.VolumeAttachment)
}

// TestPeriodicPassSettlesWhatOnlyTheAPIServerKnows: a create the informer does
// not hold is read from the API server, and so is an object the informer holds
// whose delete had an unknown outcome; an object the informer holds, settled,
// is not.
func TestPeriodicPassSettlesWhatOnlyTheAPIServerKnows(t *testing.T) {
	deleted := volumeAttachment("h-2", "node-a", pvSource("pv-2"), true)
	shown := volumeAttachment("h-3", "node-a", pvSource("pv-3"), true)
	client := fake.NewClientset(deleted, shown)
	factory := informers.NewSharedInformerFactory(client, 0)
	c, err := New(Clients{API: client, NodeStatus: client, Metadata: metadataview.Of(client)}, factory, record.NewFakeRecorder(10), metrics.New(), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	e := &settlingExecutor{Executor: c.executor}
	c.executor = e
	// The recorder settles through the executor it is built with.
	c.attachments = c.newAttachments(c.informers.attachments.Lister())
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		factory.Shutdown()
	}()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	vol := volumename.CSI(testDriver, "h-1")
	c.actual.BeginCreate(vol, "node-a", volumename.AttachmentName("h-1", testDriver, "node-a"), false)
	for _, va := range []*storagev1.VolumeAttachment{deleted, shown} {
		c.actual.Observe(cache.Observation{Volume: volumename.CSI(testDriver, *va.Spec.Source.PersistentVolumeName), Node: "node-a", VolumeAttachment: va.Name, UID: va.UID, Attached: true})
	}
	c.actual.SetDeleteUnsettled(deleted.Name, "", true)
	if err := c.attachments.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{volumename.AttachmentName("h-1", testDriver, "node-a"), deleted.Name}
	slices.Sort(want)
	slices.Sort(e.settled)
	if !slices.Equal(e.settled, want) {
		t.Errorf("settled %q, want %q", e.settled, want)
	}
}

// TestPeriodicPassRecordsWhatTheInformerHolds: a node the informer holds stays
// present, a VolumeAttachment it holds and the state lacks is recorded, and one
// recorded under an older UID is recorded again under the informer's.
func TestPeriodicPassRecordsWhatTheInformerHolds(t *testing.T) {
	missed := volumeAttachment("h-1", "node-a", pvSource("pv-1"), true)
	replaced := volumeAttachment("h-2", "node-a", pvSource("pv-2"), true)
	replaced.UID = "uid-new"
	client := fake.NewClientset(node("node-a", nil, nil), csiPV("pv-1", "h-1", "ns", "one"), csiPV("pv-2", "h-2", "ns", "two"), missed, replaced)
	factory := informers.NewSharedInformerFactory(client, 0)
	c, err := New(Clients{API: client, NodeStatus: client, Metadata: metadataview.Of(client)}, factory, record.NewFakeRecorder(10), metrics.New(), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		factory.Shutdown()
	}()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	c.actual.Observe(cache.Observation{Volume: volumename.CSI(testDriver, "h-2"), Node: "node-a", VolumeAttachment: replaced.Name, UID: "uid-old", Attached: true})
	if err := c.reconcileNodes(); err != nil {
		t.Fatal(err)
	}
	if err := c.attachments.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if !c.nodes.Get("node-a").Exists() {
		t.Error("node-a, which the informer holds, does not count as present after the pass")
	}
	if _, ok := c.actual.Object(missed.Name); !ok {
		t.Errorf("%s, which the informer holds, is not recorded after the pass", missed.Name)
	}
	if att, _ := c.actual.Object(replaced.Name); att.UID != "uid-new" {
		t.Errorf("%s is recorded with UID %q after the pass, want the informer's uid-new", replaced.Name, att.UID)
	}
}

func TestMultiAttachOfAVolumeKnownOnlyByNameIsWhatAPodSays(t *testing.T) {
	client := fake.NewClientset()
	c, err := New(Clients{API: client, NodeStatus: client, Metadata: metadataview.Of(client)}, informers.NewSharedInformerFactory(client, 0), record.NewFakeRecorder(10), metrics.New(), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	single := volumename.ISCSI("10.0.0.1:3260", "iqn.2001-04.com.example:disk1", 0)
	multi := volumename.ISCSI("10.0.0.1:3260", "iqn.2001-04.com.example:disk2", 0)
	c.desired.SetPod(cache.PodRef{Namespace: "ns", Name: "p", UID: "u"}, "node-a", []cache.Volume{{Name: single}, {Name: multi, MultiAttach: true}})
	for name, want := range map[volumename.UniqueName]bool{single: false, multi: true, volumename.CSI(testDriver, "no-pod"): false} {
		if got := c.multiAttachOf(name); got != want {
			t.Errorf("multiAttachOf(%s) = %t, want %t", name, got, want)
		}
	}
}
