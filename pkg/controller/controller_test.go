package controller

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/attachdetach-controller/attachdetach-controller/internal/metadataview"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/reconciler"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

const testDriver = "example.csi.k8s.io"

func newTestController(t *testing.T, serverObjs ...runtime.Object) *Controller {
	t.Helper()
	c, _ := newWatchedTestController(t, serverObjs...)
	return c
}

// newWatchedTestController is newTestController, and tells which resources its
// informers watch (recordWatches).
func newWatchedTestController(t *testing.T, serverObjs ...runtime.Object) (*Controller, func(resource string) bool) {
	t.Helper()
	client := fake.NewClientset(serverObjs...)
	refuseReadsTheRoleDoesNotGrant(t, client)
	watching := recordWatches(client)
	c, err := New(Clients{API: client, NodeStatus: client, Metadata: metadataview.Of(client)}, informers.NewSharedInformerFactory(client, 0), record.NewFakeRecorder(100), metrics.New(), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	return c, watching
}

// startedController returns a controller whose informers run on a fake API server
// holding objs, synced and watching, with no event handler registered yet.
func startedController(t *testing.T, objs ...runtime.Object) *Controller {
	t.Helper()
	c, watching := newWatchedTestController(t, objs...)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		c.factory.Shutdown()
	})
	c.factory.Start(ctx.Done())
	c.factory.WaitForCacheSync(ctx.Done())
	waitForWatches(t, watching)
	return c
}

// recordWatches makes the fake API server record the resources watched, and
// returns what tells whether one is: a watch counts once the server sends it
// every change.
func recordWatches(client *fake.Clientset) func(resource string) bool {
	var mu sync.Mutex
	watched := map[string]bool{}
	client.PrependWatchReactor("*", func(action clienttesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if w, ok := action.(clienttesting.WatchActionImpl); ok {
			opts = w.ListOptions
		}
		w, err := client.Tracker().Watch(action.GetResource(), action.GetNamespace(), opts)
		if err == nil {
			mu.Lock()
			watched[action.GetResource().Resource] = true
			mu.Unlock()
		}
		return true, w, err
	})
	return func(resource string) bool {
		mu.Lock()
		defer mu.Unlock()
		return watched[resource]
	}
}

// waitForWatches waits until the informers watch nodes, pods and
// VolumeAttachments: the fake API server keeps no history, and a deletion made
// between an informer's list and its watch never reaches it (the cause of a CI
// failure of TestDeletedNodesForgottenWithoutThePeriodicPass under -race, every
// deleted node still held).
func waitForWatches(t *testing.T, watching func(resource string) bool) {
	t.Helper()
	for _, resource := range []string{"nodes", "pods", "volumeattachments"} {
		if !eventually(10*time.Second, func() bool { return watching(resource) }) {
			t.Fatalf("the informer of %s never watched", resource)
		}
	}
}

// addToInformers puts objects into the informer caches, as if the informers had
// listed them.
func addToInformers(t *testing.T, c *Controller, objs ...runtime.Object) {
	t.Helper()
	for _, obj := range objs {
		var indexer toolscache.Indexer
		switch obj.(type) {
		case *v1.Pod:
			indexer = c.informers.pods.Informer().GetIndexer()
		case *v1.Node:
			indexer = c.informers.nodes.Informer().GetIndexer()
		case *v1.PersistentVolumeClaim:
			indexer = c.informers.claims.Informer().GetIndexer()
		case *v1.PersistentVolume:
			indexer = c.informers.pvs.Informer().GetIndexer()
		case *storagev1.VolumeAttachment:
			indexer = c.informers.attachments.Informer().GetIndexer()
		default:
			t.Fatalf("no informer for %T", obj)
		}
		if err := indexer.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
}

func node(name string, attached []volumename.UniqueName, inUse []volumename.UniqueName) *v1.Node {
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{cache.ManagedAnnotation: "true"}},
		Status:     v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}},
	}
	for _, v := range attached {
		n.Status.VolumesAttached = append(n.Status.VolumesAttached, v1.AttachedVolume{Name: v1.UniqueVolumeName(v)})
	}
	for _, v := range inUse {
		n.Status.VolumesInUse = append(n.Status.VolumesInUse, v1.UniqueVolumeName(v))
	}
	return n
}

func csiPV(name, handle, claimNamespace, claimName string, modes ...v1.PersistentVolumeAccessMode) *v1.PersistentVolume {
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{
			AccessModes: modes,
			ClaimRef:    &v1.ObjectReference{Namespace: claimNamespace, Name: claimName, UID: types.UID("uid-" + claimName)},
			PersistentVolumeSource: v1.PersistentVolumeSource{
				CSI: &v1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: handle},
			},
		},
	}
}

func boundClaim(namespace, name, pv string) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + name)},
		Spec:       v1.PersistentVolumeClaimSpec{VolumeName: pv},
		Status:     v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound},
	}
}

func podUsing(namespace, name, nodeName, claim string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{NodeName: nodeName, Volumes: []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
		}}}},
		Status: v1.PodStatus{Phase: v1.PodRunning},
	}
}

func volumeAttachment(handle, nodeName string, source storagev1.VolumeAttachmentSource, attached bool) *storagev1.VolumeAttachment {
	name := volumename.AttachmentName(handle, testDriver, nodeName)
	return &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Spec:       storagev1.VolumeAttachmentSpec{Attacher: testDriver, NodeName: nodeName, Source: source},
		Status:     storagev1.VolumeAttachmentStatus{Attached: attached},
	}
}

func pvSource(name string) storagev1.VolumeAttachmentSource {
	return storagev1.VolumeAttachmentSource{PersistentVolumeName: &name}
}

func TestNodeDecisionsChanged(t *testing.T) {
	volA := volumename.CSI(testDriver, "a")
	volB := volumename.CSI(testDriver, "b")
	base := cache.Node{Name: "n", Presence: cache.NodePresent, Managed: true, Ready: true, InUse: map[volumename.UniqueName]struct{}{volA: {}}}
	with := func(mutate func(n *cache.Node)) cache.Node {
		n := base
		n.InUse = map[volumename.UniqueName]struct{}{volA: {}}
		mutate(&n)
		return n
	}
	tests := []struct {
		name string
		prev cache.Node
		now  cache.Node
		want bool
	}{
		{"nothing", base, with(func(*cache.Node) {}), false},
		{"created", cache.Node{Name: "n"}, base, true},
		{"deleted", base, with(func(n *cache.Node) { n.Presence, n.Ready = cache.NodeDeleted, false }), true},
		{"became unmanaged", base, with(func(n *cache.Node) { n.Managed = false }), true},
		{"became NotReady", base, with(func(n *cache.Node) { n.Ready = false }), true},
		{"out-of-service taint", base, with(func(n *cache.Node) { n.OutOfService = true }), true},
		{"volume unmounted", base, with(func(n *cache.Node) { n.InUse = map[volumename.UniqueName]struct{}{} }), true},
		{"volume mounted", base, with(func(n *cache.Node) { n.InUse[volB] = struct{}{} }), true},
		{"one unmounted, another mounted", base, with(func(n *cache.Node) { n.InUse = map[volumename.UniqueName]struct{}{volB: {}} }), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := nodeDecisionsChanged(tc.prev, tc.now); got != tc.want {
				t.Errorf("nodeDecisionsChanged() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestUnresolvedVolumeAttachmentResolvedWhenThePVAppears(t *testing.T) {
	ctx := context.Background()
	c := newTestController(t)
	va := volumeAttachment("h-1", "node-a", pvSource("pv-1"), true)
	addToInformers(t, c, va)
	c.attachments.Observe(ctx, va)
	if got := c.actual.Holders(volumename.CSI(testDriver, "h-1"), "pv-1", "node-b"); len(got) != 1 || got[0] != "node-a" {
		t.Fatalf("Holders(pv-1) = %q, want [node-a]: the VolumeAttachment holds its PV", got)
	}

	pv := csiPV("pv-1", "h-1", "ns", "data")
	addToInformers(t, c, pv)
	c.onPV(ctx, pv, true)
	if got := c.actual.UnresolvedForPV("pv-1"); len(got) != 0 {
		t.Errorf("UnresolvedForPV(pv-1) = %q once the PV exists, want none", got)
	}
	if att, ok := c.actual.Get(volumename.CSI(testDriver, "h-1"), "node-a"); !ok || !att.Attached() {
		t.Errorf("attachment = %+v, %v once the PV exists, want attached", att, ok)
	}
}

func TestPVAppearingAfterItsClaimIsBound(t *testing.T) {
	ctx := context.Background()
	c := newTestController(t)
	addToInformers(t, c, podUsing("ns", "db", "node-a", "data"), boundClaim("ns", "data", "pv-1"))
	if err := c.populator.SyncPod(ctx, "ns/db"); err != nil {
		t.Fatal(err)
	}
	vol := volumename.CSI(testDriver, "h-1")
	if c.desired.IsDesired(vol, "node-a") {
		t.Fatal("volume desired before its PV exists")
	}
	pv := csiPV("pv-1", "h-1", "ns", "data")
	addToInformers(t, c, pv)
	c.onPV(ctx, pv, true)
	c.populator.Drain(ctx, c.opts.Workers, nothingMore())
	if !c.desired.IsDesired(vol, "node-a") {
		t.Error("volume not desired at once when its PV appears")
	}
}

func TestVolumeAttachmentDeleted(t *testing.T) {
	ctx := context.Background()
	c := newTestController(t)
	addToInformers(t, c, csiPV("pv-1", "h-1", "ns", "data"))
	va := volumeAttachment("h-1", "node-a", pvSource("pv-1"), true)
	tests := []struct {
		name string
		obj  any
	}{
		{"object", va},
		{"tombstone", toolscache.DeletedFinalStateUnknown{Key: va.Name, Obj: va}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c.attachments.Observe(ctx, va)
			c.onVolumeAttachmentDelete(tc.obj)
			if _, ok := c.actual.Get(volumename.CSI(testDriver, "h-1"), "node-a"); ok {
				t.Error("attachment kept after its VolumeAttachment was deleted")
			}
		})
	}
}

func TestNodeDeleted(t *testing.T) {
	vol := volumename.CSI(testDriver, "h-1")
	n := node("node-a", nil, []volumename.UniqueName{vol})
	tests := []struct {
		name string
		obj  any
	}{
		{"object", n},
		{"tombstone", toolscache.DeletedFinalStateUnknown{Key: "node-a", Obj: n}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestController(t)
			c.onNode(nil, n)
			c.onNodeDelete(tc.obj)
			got := c.nodes.Get("node-a")
			if got.Exists() || got.Ready || !got.Mounted(vol) {
				t.Errorf("deleted node = %+v, want gone, not Ready, its volume still counted as mounted", got)
			}
		})
	}
}

func TestRebuild(t *testing.T) {
	ctx := context.Background()
	listed := volumename.CSI(testDriver, "listed")
	detaching := volumename.CSI(testDriver, "detaching")
	wanted := volumename.CSI(testDriver, "wanted")
	c := startedController(t,
		node("node-a", []volumename.UniqueName{listed}, nil),
		csiPV("pv-listed", "listed", "ns", "c-listed"),
		csiPV("pv-detaching", "detaching", "ns", "c-detaching"),
		csiPV("pv-wanted", "wanted", "ns", "c-wanted"),
		boundClaim("ns", "c-wanted", "pv-wanted"),
		podUsing("ns", "db", "node-a", "c-wanted"),
		volumeAttachment("listed", "node-a", pvSource("pv-listed"), true),
		volumeAttachment("detaching", "node-a", pvSource("pv-detaching"), true),
		volumeAttachment("wanted", "node-a", pvSource("pv-wanted"), true),
	)
	if _, err := c.rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		vol        volumename.UniqueName
		wantHidden bool
	}{
		{listed, false},
		{detaching, true},
		{wanted, false},
	}
	for _, tc := range tests {
		att, ok := c.actual.Get(tc.vol, "node-a")
		if !ok {
			t.Errorf("%s: no attachment after rebuild", tc.vol)
			continue
		}
		if att.HiddenFromNodeStatus != tc.wantHidden {
			t.Errorf("%s: hidden = %v, want %v", tc.vol, att.HiddenFromNodeStatus, tc.wantHidden)
		}
	}
	if !c.nodes.Get("node-a").Exists() || !c.desired.IsDesired(wanted, "node-a") {
		t.Error("rebuild did not record the node and the desired state")
	}
}

// TestRebuildTrustsVolumeAttachmentsOverNodeStatus: node-a's status does not list
// the RWO volume as attached but a VolumeAttachment for it exists there, and
// kubelet still has it in use, so no detach may start: the only operation that
// could start is an attach to node-b, which must not.
func TestRebuildTrustsVolumeAttachmentsOverNodeStatus(t *testing.T) {
	ctx := context.Background()
	vol := volumename.CSI(testDriver, "h-1")
	c := startedController(t,
		node("node-a", nil, []volumename.UniqueName{vol}),
		node("node-b", nil, nil),
		csiPV("pv-1", "h-1", "ns", "data", v1.ReadWriteOnce),
		boundClaim("ns", "data", "pv-1"),
		podUsing("ns", "db", "node-b", "data"),
		volumeAttachment("h-1", "node-a", pvSource("pv-1"), false),
	)
	if _, err := c.rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	c.reconciler.Sync(ctx, vol)
	if c.executor.IsRunning(vol, "node-b") {
		t.Error("an attach started on node-b while a VolumeAttachment for the RWO volume exists on node-a")
	}
}

// TestRebuildReportOnlyVolumesFromNodeStatus: an in-tree iSCSI or FC volume has
// no VolumeAttachment, so after a restart node status is its only record. A
// managed node's entries are attached there and hold a single-attach volume; an
// unmanaged node's entries are kubelet's own business.
func TestRebuildReportOnlyVolumesFromNodeStatus(t *testing.T) {
	ctx := context.Background()
	iscsi := volumename.ISCSI("10.0.0.1:3260", "iqn.2001-04.com.example:disk1", 0)
	fc := volumename.UniqueName("kubernetes.io/fc/[50060e801049cfd1]:0")
	unmanaged := node("node-u", []volumename.UniqueName{fc}, nil)
	unmanaged.Annotations = nil
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
	c := startedController(t,
		node("node-a", []volumename.UniqueName{iscsi, fc}, []volumename.UniqueName{iscsi}),
		node("node-b", nil, nil),
		unmanaged,
		pv,
		boundClaim("ns", "data", "pv-iscsi"),
		podUsing("ns", "db", "node-b", "data"),
	)
	if _, err := c.rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.actual.ReportedVolumes("node-a"); !slices.Equal(got, []volumename.UniqueName{fc, iscsi}) {
		t.Errorf("node-a reports %v after rebuild, want %v", got, []volumename.UniqueName{fc, iscsi})
	}
	if got := c.actual.ReportedVolumes("node-u"); len(got) != 0 {
		t.Errorf("unmanaged node-u reports %v after rebuild, want nothing", got)
	}
	if !c.desired.IsDesired(iscsi, "node-b") {
		t.Fatal("the pod on node-b does not want the iSCSI volume")
	}
	c.reconciler.Sync(ctx, iscsi)
	if got := c.actual.ReportedVolumes("node-b"); len(got) != 0 {
		t.Errorf("node-b reports %v while node-a holds the RWO iSCSI volume, want nothing", got)
	}
}

func TestWaitForCurrentInformers(t *testing.T) {
	va := volumeAttachment("h-1", "node-a", pvSource("pv-1"), true)
	atVersion := func(rv string) *v1.Node {
		n := node("node-a", nil, nil)
		n.ResourceVersion = rv
		return n
	}
	podAtVersion := func(rv string) *v1.Pod {
		p := podUsing("ns", "pod-1", "node-a", "claim-1")
		p.ResourceVersion = rv
		return p
	}
	tests := []struct {
		name     string
		server   []runtime.Object
		informer []runtime.Object
		wantErr  bool
	}{
		{"informer holds every object", []runtime.Object{va, atVersion("7")}, []runtime.Object{va, atVersion("7")}, false},
		{"informer lacks a VolumeAttachment", []runtime.Object{va}, nil, true},
		{"informer lacks a node", []runtime.Object{atVersion("7")}, nil, true},
		{"informer holds an older version of a node", []runtime.Object{atVersion("7")}, []runtime.Object{atVersion("6")}, true},
		{"informer holds a newer version of a node", []runtime.Object{atVersion("7")}, []runtime.Object{atVersion("10")}, false},
		{"informer holds a node deleted since", nil, []runtime.Object{atVersion("7")}, false},
		{"informer lacks a pod", []runtime.Object{podAtVersion("7")}, nil, true},
		{"informer holds an older version of a pod", []runtime.Object{podAtVersion("7")}, []runtime.Object{podAtVersion("6")}, true},
		{"informer holds a newer version of a pod", []runtime.Object{podAtVersion("7")}, []runtime.Object{podAtVersion("10")}, false},
		{"informer holds a pod deleted since", nil, []runtime.Object{podAtVersion("7")}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestController(t, tc.server...)
			// The objects of the API server are at version 7 at most.
			presentVersionIs(c.client.(*fake.Clientset), "nodes", "7")
			presentVersionIs(c.client.(*fake.Clientset), "pods", "7")
			c.presentWait = 0
			addToInformers(t, c, tc.informer...)
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			err := c.waitForCurrentInformers(ctx)
			if (err != nil) != tc.wantErr {
				t.Errorf("waitForCurrentInformers() = %v, want error %v", err, tc.wantErr)
			}
		})
	}
}

// fullLists counts the lists of every object of the resource sent to client:
// not those of one object, which read the present's resourceVersion.
func fullLists(client *fake.Clientset, resource string) int {
	n := 0
	for _, a := range client.Actions() {
		if l, ok := a.(clienttesting.ListActionImpl); ok && l.GetResource().Resource == resource && l.GetListOptions().Limit != 1 {
			n++
		}
	}
	return n
}

// TestStartupCheckListsOnlyWhatIsStillBehind: a check that passed is not run
// again while another waits for its informer.
func TestStartupCheckListsOnlyWhatIsStillBehind(t *testing.T) {
	pod := podUsing("ns", "pod-1", "node-a", "claim-1")
	c := newTestController(t, node("node-a", nil, nil), pod)
	c.presentWait = 0
	addToInformers(t, c, node("node-a", nil, nil))
	client := c.client.(*fake.Clientset)
	lists := func(resource string) int { return fullLists(client, resource) }
	done := make(chan error, 1)
	go func() { done <- c.waitForCurrentInformers(t.Context()) }()
	for lists("pods") < 3 {
		time.Sleep(10 * time.Millisecond)
	}
	addToInformers(t, c, pod)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := lists("nodes"); n != 1 {
		t.Errorf("nodes listed %d times, want once: the check passed the first time", n)
	}
	if n := lists("volumeattachments"); n != 1 {
		t.Errorf("VolumeAttachments listed %d times, want once", n)
	}
}

// created tells whether the controller has asked to create the VolumeAttachment.
func created(c *Controller, name string) bool {
	for _, a := range c.client.(*fake.Clientset).Actions() {
		if ca, ok := a.(clienttesting.CreateAction); ok && a.GetResource().Resource == "volumeattachments" {
			if va, ok := ca.GetObject().(*storagev1.VolumeAttachment); ok && va.Name == name {
				return true
			}
		}
	}
	return false
}

// waitForCreate waits until the controller has created the VolumeAttachment.
func waitForCreate(t *testing.T, c *Controller, name string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if created(c, name) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("VolumeAttachment %s was not created", name)
}

func TestActsAtOnce(t *testing.T) {
	vaName := volumename.AttachmentName("h-1", testDriver, "node-a")
	tests := []struct {
		name  string
		setup func(ctx context.Context, c *Controller)
		event func(ctx context.Context, c *Controller)
	}{
		{
			name: "node appears after its pods",
			event: func(_ context.Context, c *Controller) {
				n := node("node-a", nil, nil)
				addToInformers(t, c, n)
				c.onNode(nil, n)
			},
		},
		{
			name: "VolumeAttachment deleted by someone else while wanted",
			setup: func(ctx context.Context, c *Controller) {
				c.onNode(nil, node("node-a", nil, nil))
				c.attachments.Observe(ctx, volumeAttachment("h-1", "node-a", pvSource("pv-1"), true))
			},
			event: func(_ context.Context, c *Controller) {
				c.onVolumeAttachmentDelete(volumeAttachment("h-1", "node-a", pvSource("pv-1"), true))
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			c := newTestController(t)
			addToInformers(t, c,
				csiPV("pv-1", "h-1", "ns", "data", v1.ReadWriteOnce),
				boundClaim("ns", "data", "pv-1"),
				podUsing("ns", "db", "node-a", "data"),
			)
			if err := c.populator.SyncPod(ctx, "ns/db"); err != nil {
				t.Fatal(err)
			}
			if tc.setup != nil {
				tc.setup(ctx, c)
			}
			go c.reconciler.Run(ctx, 1)
			time.Sleep(100 * time.Millisecond)
			if created(c, vaName) {
				t.Fatal("VolumeAttachment created before the event")
			}
			tc.event(ctx, c)
			waitForCreate(t, c, vaName)
		})
	}
}

func TestUnmountPolicies(t *testing.T) {
	opts := DefaultOptions()
	opts.MaxWaitForUnmountPerDriver = map[string]reconciler.DriverUnmountPolicy{"fast": {MaxWait: 30 * time.Second}, "careful": {NeverForce: true}}
	waits, never := unmountPolicies(opts)
	if !maps.Equal(waits, map[string]time.Duration{"": 6 * time.Minute, "fast": 30 * time.Second}) || !maps.Equal(never, map[string]bool{"careful": true}) {
		t.Errorf("unmountPolicies = %v, %v", waits, never)
	}
	opts.DisableForceDetachOnTimeout = true
	waits, never = unmountPolicies(opts)
	if len(waits) != 0 || len(never) != 3 {
		t.Errorf("with force detach off: unmountPolicies = %v, %v; want every driver never", waits, never)
	}
}

// nothingMore is populator.Drain's more for a queue that gets no more pods.
func nothingMore() <-chan struct{} {
	more := make(chan struct{})
	close(more)
	return more
}
