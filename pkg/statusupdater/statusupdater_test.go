package statusupdater_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	clienttesting "k8s.io/client-go/testing"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/statusupdater"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

const nodeName = "node-1"

var (
	volA   = volumename.CSI("d", "a")
	volB   = volumename.CSI("d", "b")
	volC   = volumename.CSI("d", "c")
	inTree = v1.AttachedVolume{Name: "kubernetes.io/aws-ebs/aws://us-east-1a/vol-1", DevicePath: "/dev/xvdf"}
	iscsi  = volumename.ISCSI("10.0.0.1:3260", "iqn.2001-04.com.example:disk1", 0)
	fc     = volumename.UniqueName("kubernetes.io/fc/[50060e801049cfd1]:0")
)

func csiEntry(name volumename.UniqueName) v1.AttachedVolume {
	return v1.AttachedVolume{Name: v1.UniqueVolumeName(name), DevicePath: ""}
}

func managedNode(resourceVersion string, attached ...v1.AttachedVolume) *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:            nodeName,
			ResourceVersion: resourceVersion,
			Annotations:     map[string]string{cache.ManagedAnnotation: "true"},
		},
		Status: v1.NodeStatus{VolumesAttached: attached},
	}
}

// harness is an Updater on a fake clientset and a node lister filled by hand.
type harness struct {
	client  *fake.Clientset
	nodes   toolscache.Indexer
	actual  *cache.ActualState
	pods    podsOnNode
	updater *statusupdater.Updater
}

// podsOnNode stands for the node's pods as the API server lists them: needed
// holds the volumes one of them needs.
type podsOnNode struct {
	mu     sync.Mutex
	needed []volumename.UniqueName
	err    error
	reads  int
}

func (p *podsOnNode) NeededOnNode(_ context.Context, volume volumename.UniqueName, _ string) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reads++
	return slices.Contains(p.needed, volume), p.err
}

// need makes a pod of the node need the volume from now on.
func (p *podsOnNode) need(volume volumename.UniqueName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.needed = append(p.needed, volume)
}

func newHarness(t *testing.T, informerNode *v1.Node, serverNodes ...runtime.Object) *harness {
	t.Helper()
	return newHarnessWithBacklog(t, nil, 0, informerNode, serverNodes...)
}

// newHarnessWithBacklog is newHarness with an updater told by backlog how long
// other requests wait for the rate limit, and batching over minWindow at least.
func newHarnessWithBacklog(t *testing.T, backlog func() time.Duration, minWindow time.Duration, informerNode *v1.Node, serverNodes ...runtime.Object) *harness {
	t.Helper()
	h := &harness{
		client: fake.NewClientset(serverNodes...),
		nodes:  toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{}),
		actual: cache.NewActualState(),
	}
	if informerNode != nil {
		if err := h.nodes.Add(informerNode); err != nil {
			t.Fatal(err)
		}
	}
	h.client.ClearActions()
	h.updater = statusupdater.New(h.client, corelisters.NewNodeLister(h.nodes), h.actual, &h.pods, metrics.New(), backlog, minWindow)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		h.updater.Run(ctx, 1)
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
	})
	return h
}

func (h *harness) attach(name volumename.UniqueName, attached bool) {
	h.actual.Observe(cache.Observation{
		Volume: name, Node: nodeName, VolumeAttachment: "va-" + string(name), Attached: attached,
	})
}

// patches returns the node status patches sent, and fails on any other request.
func (h *harness) patches(t *testing.T) []clienttesting.PatchAction {
	t.Helper()
	var out []clienttesting.PatchAction
	for _, a := range h.client.Actions() {
		p, ok := a.(clienttesting.PatchAction)
		if !ok {
			t.Errorf("unexpected request %s %s", a.GetVerb(), a.GetResource().Resource)
			continue
		}
		out = append(out, p)
	}
	return out
}

// patchedList decodes a status patch and checks its form.
func patchedList(t *testing.T, p clienttesting.PatchAction) []v1.AttachedVolume {
	t.Helper()
	if p.GetResource().Resource != "nodes" || p.GetSubresource() != "status" || p.GetName() != nodeName {
		t.Errorf("patch of %s/%s %s, want nodes/status %s", p.GetResource().Resource, p.GetSubresource(), p.GetName(), nodeName)
	}
	if p.GetPatchType() != types.MergePatchType {
		t.Errorf("patch type %s, want %s", p.GetPatchType(), types.MergePatchType)
	}
	var raw struct {
		// Metadata may hold a resourceVersion, a precondition.
		Metadata map[string]string
		Status   map[string][]map[string]*string
	}
	if err := json.Unmarshal(p.GetPatch(), &raw); err != nil {
		t.Fatalf("patch %s: %v", p.GetPatch(), err)
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(p.GetPatch(), &all); err != nil {
		t.Fatalf("patch %s: %v", p.GetPatch(), err)
	}
	if _, rv := raw.Metadata["resourceVersion"]; len(raw.Status) != 1 || len(all) > 2 || (len(all) == 2 && (!rv || len(raw.Metadata) != 1)) {
		t.Errorf("patch %s touches more than status.volumesAttached", p.GetPatch())
	}
	var out []v1.AttachedVolume
	for _, entry := range raw.Status["volumesAttached"] {
		if entry["name"] == nil || entry["devicePath"] == nil {
			t.Errorf("patch entry %v lacks name or devicePath", entry)
			continue
		}
		out = append(out, v1.AttachedVolume{Name: v1.UniqueVolumeName(*entry["name"]), DevicePath: *entry["devicePath"]})
	}
	return out
}

func TestSync(t *testing.T) {
	tests := []struct {
		name string
		// node is the informer's and the server's copy; nil when the node is gone.
		node     *v1.Node
		attached []volumename.UniqueName
		pending  []volumename.UniqueName
		hidden   []volumename.UniqueName
		// reportOnly are in-tree iSCSI and FC volumes recorded attached.
		reportOnly []volumename.UniqueName
		// want is the list of the single patch expected; nil means no request.
		want []v1.AttachedVolume
	}{
		{
			name:     "nothing listed, two attached: one patch with both",
			node:     managedNode("1"),
			attached: []volumename.UniqueName{volB, volA},
			want:     []v1.AttachedVolume{csiEntry(volA), csiEntry(volB)},
		},
		{
			name:     "already listed: no request",
			node:     managedNode("1", csiEntry(volA), csiEntry(volB)),
			attached: []volumename.UniqueName{volA, volB},
		},
		{
			name:     "listed in another order: no request",
			node:     managedNode("1", csiEntry(volB), csiEntry(volA)),
			attached: []volumename.UniqueName{volA, volB},
		},
		{
			name:     "not attached yet: not listed",
			node:     managedNode("1"),
			attached: []volumename.UniqueName{volA},
			pending:  []volumename.UniqueName{volB},
			want:     []v1.AttachedVolume{csiEntry(volA)},
		},
		{
			name:     "hidden during a detach: removed",
			node:     managedNode("1", csiEntry(volA), csiEntry(volB)),
			attached: []volumename.UniqueName{volA, volB},
			hidden:   []volumename.UniqueName{volB},
			want:     []v1.AttachedVolume{csiEntry(volA)},
		},
		{
			name: "stale CSI entry removed",
			node: managedNode("1", csiEntry(volC)),
			want: []v1.AttachedVolume{},
		},
		{
			name:     "entries of other plugins kept",
			node:     managedNode("1", inTree, csiEntry(volC)),
			attached: []volumename.UniqueName{volA},
			want:     []v1.AttachedVolume{inTree, csiEntry(volA)},
		},
		{
			name: "only entries of other plugins: no request",
			node: managedNode("1", inTree),
		},
		{
			name:       "iSCSI and FC volumes listed with no device path, by their kubelet names",
			node:       managedNode("1", inTree),
			attached:   []volumename.UniqueName{volA},
			reportOnly: []volumename.UniqueName{iscsi, fc},
			want:       []v1.AttachedVolume{inTree, csiEntry(volA), csiEntry(fc), csiEntry(iscsi)},
		},
		{
			name: "stale iSCSI entry removed",
			node: managedNode("1", csiEntry(iscsi)),
			want: []v1.AttachedVolume{},
		},
		{
			name:       "iSCSI entry being detached that the node reports in use: kept, no request",
			node:       inUse(managedNode("1", csiEntry(iscsi)), iscsi),
			reportOnly: []volumename.UniqueName{iscsi},
			hidden:     []volumename.UniqueName{iscsi},
		},
		{
			name:       "iSCSI entry being detached that the node reports in use, another volume attached: kept",
			node:       inUse(managedNode("1", csiEntry(iscsi)), iscsi),
			attached:   []volumename.UniqueName{volA},
			reportOnly: []volumename.UniqueName{iscsi},
			hidden:     []volumename.UniqueName{iscsi},
			want:       []v1.AttachedVolume{csiEntry(volA), csiEntry(iscsi)},
		},
		{
			name: "iSCSI entry no longer recorded (its detach is over), the node still reporting it in use: removed",
			node: inUse(managedNode("1", csiEntry(iscsi)), iscsi),
			want: []v1.AttachedVolume{},
		},
		{
			name:     "CSI entry with a device path rewritten",
			node:     managedNode("1", v1.AttachedVolume{Name: v1.UniqueVolumeName(volA), DevicePath: "/dev/sdb"}),
			attached: []volumename.UniqueName{volA},
			want:     []v1.AttachedVolume{csiEntry(volA)},
		},
		{
			name:     "deleted node: no request",
			attached: []volumename.UniqueName{volA},
		},
		{
			name: "unmanaged node: no request",
			node: &v1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: nodeName, ResourceVersion: "1"},
			},
			attached: []volumename.UniqueName{volA},
		},
		{
			name: "annotation not true: no request",
			node: &v1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: nodeName, ResourceVersion: "1", Annotations: map[string]string{cache.ManagedAnnotation: "false"}},
			},
			attached: []volumename.UniqueName{volA},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var server []runtime.Object
			if tc.node != nil {
				server = append(server, tc.node.DeepCopy())
			}
			h := newHarness(t, tc.node, server...)
			for _, v := range tc.attached {
				h.attach(v, true)
			}
			for _, v := range tc.pending {
				h.attach(v, false)
			}
			for _, v := range tc.reportOnly {
				h.actual.AddReportOnly(v, nodeName, false)
			}
			for _, v := range tc.hidden {
				h.actual.SetHiddenFromNodeStatus(v, nodeName, true)
			}
			if err := h.updater.Sync(context.Background(), nodeName); err != nil {
				t.Fatalf("Sync: %v", err)
			}
			patches := h.patches(t)
			if tc.want == nil {
				if len(patches) != 0 {
					t.Errorf("sent %d patches, want none", len(patches))
				}
				return
			}
			if len(patches) != 1 {
				t.Fatalf("sent %d patches, want 1", len(patches))
			}
			got := patchedList(t, patches[0])
			if !slices.Equal(got, tc.want) {
				t.Errorf("patched volumesAttached = %v, want %v", got, tc.want)
			}
		})
	}
}

func inUse(n *v1.Node, vols ...volumename.UniqueName) *v1.Node {
	for _, v := range vols {
		n.Status.VolumesInUse = append(n.Status.VolumesInUse, v1.UniqueVolumeName(v))
	}
	return n
}

// TestSyncDropsReportOnlyVolumesOnlyFromTheNodeJudged: taking an iSCSI volume
// out of node status, its only record, applies only to the node version that
// showed it unused; a node forced out of service loses it even in use.
func TestSyncDropsReportOnlyVolumesOnlyFromTheNodeJudged(t *testing.T) {
	tainted := inUse(managedNode("7", csiEntry(iscsi)), iscsi)
	tainted.Spec.Taints = []v1.Taint{{Key: cache.OutOfServiceTaint, Effect: v1.TaintEffectNoExecute}}
	tests := []struct {
		name string
		node *v1.Node
		hide cache.ForceRule
	}{
		{name: "not in use", node: managedNode("7", csiEntry(iscsi))},
		{name: "in use on a node out of service, detached under that rule", node: tainted, hide: cache.ForcedOutOfService},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.node, tc.node.DeepCopy())
			h.actual.AddReportOnly(iscsi, nodeName, false)
			h.actual.HideForDetach(iscsi, nodeName, tc.hide)
			if err := h.updater.Sync(context.Background(), nodeName); err != nil {
				t.Fatal(err)
			}
			patches := h.patches(t)
			if len(patches) != 1 {
				t.Fatalf("sent %d patches, want 1", len(patches))
			}
			want := `{"metadata":{"resourceVersion":"7"},"status":{"volumesAttached":[]}}`
			if got := string(patches[0].GetPatch()); got != want {
				t.Errorf("patch = %s, want %s", got, want)
			}
		})
	}
}

// TestSyncBehindTheServerKeepsReportOnlyRecords: the informer's copy of the node
// is behind the API server, which lists an iSCSI volume being detached that the
// node reports in use. A write judged on that copy must not replace the server's
// list unless the server still has that copy's version (found by the simulation:
// seed 40).
func TestSyncBehindTheServerKeepsReportOnlyRecords(t *testing.T) {
	informed := managedNode("3")
	server := inUse(managedNode("4", csiEntry(iscsi)), iscsi)
	h := newHarness(t, informed, server)
	h.actual.AddReportOnly(iscsi, nodeName, false)
	h.actual.HideForDetach(iscsi, nodeName, cache.NotForced)
	h.attach(volA, true)
	if err := h.updater.Sync(context.Background(), nodeName); err != nil {
		t.Fatal(err)
	}
	patches := h.patches(t)
	if len(patches) != 1 {
		t.Fatalf("sent %d patches, want 1", len(patches))
	}
	want := `{"metadata":{"resourceVersion":"3"},"status":{"volumesAttached":[{"name":"kubernetes.io/csi/d^a","devicePath":""}]}}`
	if got := string(patches[0].GetPatch()); got != want {
		t.Errorf("patch = %s, want %s: only the version judged may be replaced", got, want)
	}
}

func TestSyncPatchBody(t *testing.T) {
	h := newHarness(t, managedNode("1"), managedNode("1"))
	h.attach(volA, true)
	if err := h.updater.Sync(context.Background(), nodeName); err != nil {
		t.Fatal(err)
	}
	patches := h.patches(t)
	if len(patches) != 1 {
		t.Fatalf("sent %d patches, want 1", len(patches))
	}
	want := `{"status":{"volumesAttached":[{"name":"kubernetes.io/csi/d^a","devicePath":""}]}}`
	if got := string(patches[0].GetPatch()); got != want {
		t.Errorf("patch = %s, want %s", got, want)
	}
	server, err := h.client.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := server.Status.VolumesAttached; !slices.Equal(got, []v1.AttachedVolume{csiEntry(volA)}) {
		t.Errorf("server node lists %v after the patch", got)
	}
}

func TestSyncBeforeTheInformerCatchesUp(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, managedNode("1"), managedNode("1"))
	h.attach(volA, true)
	if err := h.updater.Sync(ctx, nodeName); err != nil {
		t.Fatal(err)
	}
	if n := len(h.patches(t)); n != 1 {
		t.Fatalf("first Sync sent %d patches, want 1", n)
	}

	h.client.ClearActions()
	if err := h.updater.Sync(ctx, nodeName); err != nil {
		t.Fatal(err)
	}
	if n := len(h.patches(t)); n != 0 {
		t.Errorf("second Sync with the informer still at the old version sent %d patches, want none", n)
	}

	h.attach(volB, true)
	if err := h.updater.Sync(ctx, nodeName); err != nil {
		t.Fatal(err)
	}
	patches := h.patches(t)
	if len(patches) != 1 {
		t.Fatalf("Sync after a new attachment sent %d patches, want 1", len(patches))
	}
	if got := patchedList(t, patches[0]); !slices.Equal(got, []v1.AttachedVolume{csiEntry(volA), csiEntry(volB)}) {
		t.Errorf("patched volumesAttached = %v, want both volumes", got)
	}

	h.client.ClearActions()
	if err := h.nodes.Update(managedNode("3", csiEntry(volA), csiEntry(volB))); err != nil {
		t.Fatal(err)
	}
	if err := h.updater.Sync(ctx, nodeName); err != nil {
		t.Fatal(err)
	}
	if n := len(h.patches(t)); n != 0 {
		t.Errorf("Sync once the informer shows the written list sent %d patches, want none", n)
	}

	if err := h.nodes.Update(managedNode("4", csiEntry(volA))); err != nil {
		t.Fatal(err)
	}
	if err := h.updater.Sync(ctx, nodeName); err != nil {
		t.Fatal(err)
	}
	if n := len(h.patches(t)); n != 1 {
		t.Errorf("Sync after someone else dropped an entry sent %d patches, want 1", n)
	}
}

func TestSyncErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("node gone from the server", func(t *testing.T) {
		h := newHarness(t, managedNode("1"))
		h.attach(volA, true)
		if err := h.updater.Sync(ctx, nodeName); err != nil {
			t.Errorf("Sync = %v, want nil for a node that is gone", err)
		}
	})
	t.Run("patch fails and is retried", func(t *testing.T) {
		h := newHarness(t, managedNode("1"), managedNode("1"))
		h.attach(volA, true)
		failing := true
		h.client.PrependReactor("patch", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
			if failing {
				return true, nil, errors.New("etcd unavailable")
			}
			return false, nil, nil
		})
		if err := h.updater.Sync(ctx, nodeName); err == nil {
			t.Fatal("Sync = nil, want the patch error")
		}
		failing = false
		h.client.ClearActions()
		if err := h.updater.Sync(ctx, nodeName); err != nil {
			t.Fatal(err)
		}
		if n := len(h.patches(t)); n != 1 {
			t.Errorf("Sync after a failed patch sent %d patches, want 1", n)
		}
	})
}

func TestForgetDropsTheWrittenList(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, managedNode("1"), managedNode("1"))
	h.attach(volA, true)
	if err := h.updater.Sync(ctx, nodeName); err != nil {
		t.Fatal(err)
	}
	h.updater.Forget(nodeName)
	h.client.ClearActions()
	if err := h.updater.Sync(ctx, nodeName); err != nil {
		t.Fatal(err)
	}
	if n := len(h.patches(t)); n != 1 {
		t.Errorf("Sync after Forget sent %d patches, want 1 (the informer copy is all it has)", n)
	}
}

// TestSyncOfCSIVolumesOnlyNeedsNoPrecondition: only the entries of in-tree iSCSI
// and Fibre Channel volumes, whose only record is node status, make a patch
// depend on the node's resourceVersion; a node with CSI volumes alone is patched
// without one.
func TestSyncOfCSIVolumesOnlyNeedsNoPrecondition(t *testing.T) {
	tests := []struct {
		name     string
		listed   []v1.AttachedVolume
		attached []volumename.UniqueName
		want     string
	}{
		{"one added", []v1.AttachedVolume{csiEntry(volA)}, []volumename.UniqueName{volA, volB},
			`{"status":{"volumesAttached":[{"name":"kubernetes.io/csi/d^a","devicePath":""},{"name":"kubernetes.io/csi/d^b","devicePath":""}]}}`},
		{"one removed", []v1.AttachedVolume{csiEntry(volA), csiEntry(volB)}, []volumename.UniqueName{volB},
			`{"status":{"volumesAttached":[{"name":"kubernetes.io/csi/d^b","devicePath":""}]}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, managedNode("1", tc.listed...), managedNode("1", tc.listed...))
			for _, v := range tc.attached {
				h.attach(v, true)
			}
			if err := h.updater.Sync(context.Background(), nodeName); err != nil {
				t.Fatal(err)
			}
			patches := h.patches(t)
			if len(patches) != 1 {
				t.Fatalf("sent %d patches, want 1", len(patches))
			}
			if got := string(patches[0].GetPatch()); got != tc.want {
				t.Errorf("patch = %s, want %s", got, tc.want)
			}
		})
	}
}
