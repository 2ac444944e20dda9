package attachments_test

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/attachments"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/populator"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

const testDriver = "example.csi.k8s.io"

// harness is a recorder over informer caches filled by hand, telling no one.
type harness struct {
	actual   *cache.ActualState
	recorder *attachments.Recorder
}

func newHarness(t *testing.T, objs ...runtime.Object) *harness {
	t.Helper()
	index := func() toolscache.Indexer {
		return toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
	}
	vas, pvs, nodes := index(), index(), index()
	for _, obj := range objs {
		var into toolscache.Indexer
		switch obj.(type) {
		case *storagev1.VolumeAttachment:
			into = vas
		case *v1.PersistentVolume:
			into = pvs
		case *v1.Node:
			into = nodes
		default:
			t.Fatalf("no informer cache for %T", obj)
		}
		if err := into.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	h := &harness{actual: cache.NewActualState()}
	h.recorder = attachments.New(attachments.Config{
		Listers: attachments.Listers{
			Attachments: storagelisters.NewVolumeAttachmentLister(vas),
			PVs:         corelisters.NewPersistentVolumeLister(pvs),
			Nodes:       corelisters.NewNodeLister(nodes),
		},
		Actual:     h.actual,
		PVs:        populator.New(populator.Listers{}, cache.NewDesiredState(), nil),
		Executor:   nobody{},
		NodeStatus: nobody{},
		Volumes:    volumesIgnored{},
	})
	return h
}

// nobody stands for the executor and the status updater, which these tests do
// not look at.
type nobody struct{}

func (nobody) ObserveVolumeAttachment(string, *storagev1.VolumeAttachment) {}
func (nobody) Settle(context.Context, cache.Attachment)                    {}
func (nobody) WaitsFor(string) bool                                        { return false }
func (nobody) Enqueue(string)                                              {}

// volumesIgnored stands for the reconciler's queue.
type volumesIgnored struct{}

func (volumesIgnored) Enqueue(volumename.UniqueName) {}

// volumeAttachment is the object the external-attacher acts on for the handle
// and node.
func volumeAttachment(handle, nodeName string, source storagev1.VolumeAttachmentSource, attached bool) *storagev1.VolumeAttachment {
	va := &storagev1.VolumeAttachment{Spec: storagev1.VolumeAttachmentSpec{Attacher: testDriver, NodeName: nodeName, Source: source}}
	va.Name = volumename.AttachmentName(handle, testDriver, nodeName)
	va.UID, va.Status.Attached = types.UID("uid-"+va.Name), attached
	return va
}

func pvSource(name string) storagev1.VolumeAttachmentSource {
	return storagev1.VolumeAttachmentSource{PersistentVolumeName: &name}
}

// csiPV is a CSI PersistentVolume of testDriver that lists no access modes.
func csiPV(name, handle string) *v1.PersistentVolume {
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}}
	pv.Spec.CSI = &v1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: handle}
	return pv
}

// node is a node whose status lists the volumes as attached and in use.
func node(name string, attached, inUse []volumename.UniqueName) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, v := range attached {
		n.Status.VolumesAttached = append(n.Status.VolumesAttached, v1.AttachedVolume{Name: v1.UniqueVolumeName(v)})
	}
	for _, v := range inUse {
		n.Status.VolumesInUse = append(n.Status.VolumesInUse, v1.UniqueVolumeName(v))
	}
	return n
}

func TestVolumeOf(t *testing.T) {
	csiName := volumename.CSI(testDriver, "h-1")
	inline := &v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{
		CSI: &v1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: "h-inline"},
	}}
	ebsPV := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-ebs"},
		Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{
			AWSElasticBlockStore: &v1.AWSElasticBlockStoreVolumeSource{VolumeID: "aws://us-east-1a/vol-0abc"},
		}},
	}
	ebsVA := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: volumename.AttachmentName("vol-0abc", "ebs.csi.aws.com", "node-1")},
		Spec:       storagev1.VolumeAttachmentSpec{Attacher: "ebs.csi.aws.com", NodeName: "node-1", Source: pvSource("pv-ebs")},
	}
	tests := []struct {
		name   string
		objs   []runtime.Object
		va     *storagev1.VolumeAttachment
		want   volumename.UniqueName
		wantOK bool
	}{
		{
			name:   "inline spec",
			va:     volumeAttachment("h-inline", "node-1", storagev1.VolumeAttachmentSource{InlineVolumeSpec: inline}, true),
			want:   volumename.CSI(testDriver, "h-inline"),
			wantOK: true,
		},
		{
			name:   "CSI PV",
			objs:   []runtime.Object{csiPV("pv-1", "h-1")},
			va:     volumeAttachment("h-1", "node-1", pvSource("pv-1"), true),
			want:   csiName,
			wantOK: true,
		},
		{
			name:   "in-tree PV translated",
			objs:   []runtime.Object{ebsPV},
			va:     ebsVA,
			want:   volumename.CSI("ebs.csi.aws.com", "vol-0abc"),
			wantOK: true,
		},
		{
			name:   "PV gone, node status lists it as attached",
			objs:   []runtime.Object{node("node-1", []volumename.UniqueName{volumename.CSI(testDriver, "other"), csiName}, nil)},
			va:     volumeAttachment("h-1", "node-1", pvSource("pv-1"), true),
			want:   csiName,
			wantOK: true,
		},
		{
			name:   "PV gone, node status lists it in use",
			objs:   []runtime.Object{node("node-1", nil, []volumename.UniqueName{csiName})},
			va:     volumeAttachment("h-1", "node-1", pvSource("pv-1"), true),
			want:   csiName,
			wantOK: true,
		},
		{
			name: "PV gone, node status lists only other volumes",
			objs: []runtime.Object{node("node-1", []volumename.UniqueName{volumename.CSI(testDriver, "other")}, nil)},
			va:   volumeAttachment("h-1", "node-1", pvSource("pv-1"), true),
		},
		{
			name: "PV gone, node status lists a volume of another driver with the same handle",
			objs: []runtime.Object{node("node-1", []volumename.UniqueName{volumename.CSI("other.csi.k8s.io", "h-1")}, nil)},
			va:   volumeAttachment("h-1", "node-1", pvSource("pv-1"), true),
		},
		{
			name: "PV and node gone",
			va:   volumeAttachment("h-1", "node-1", pvSource("pv-1"), true),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.objs...)
			vol, ok := h.recorder.VolumeOf(tc.va)
			if got := vol.Name; ok != tc.wantOK || got != tc.want {
				t.Errorf("VolumeOf() = %q, %v, want %q, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestObserveVolumeAttachment(t *testing.T) {
	vol := volumename.CSI(testDriver, "h-1")
	tests := []struct {
		name string
		va   *storagev1.VolumeAttachment
		want cache.Attachment
	}{
		{
			name: "attached",
			va:   volumeAttachment("h-1", "node-1", pvSource("pv-1"), true),
			want: cache.Attachment{Attached: true},
		},
		{
			name: "attach error",
			va: func() *storagev1.VolumeAttachment {
				va := volumeAttachment("h-1", "node-1", pvSource("pv-1"), false)
				va.Status.AttachError = &storagev1.VolumeError{Message: "boom"}
				return va
			}(),
			want: cache.Attachment{AttachError: "boom"},
		},
		{
			name: "being deleted",
			va: func() *storagev1.VolumeAttachment {
				va := volumeAttachment("h-1", "node-1", pvSource("pv-1"), true)
				now := metav1.Now()
				va.DeletionTimestamp = &now
				va.Finalizers = []string{"external-attacher/example-csi-k8s-io"}
				return va
			}(),
			want: cache.Attachment{Attached: true, Deleting: true},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, csiPV("pv-1", "h-1"))
			h.recorder.Observe(t.Context(), tc.va)
			got, ok := h.actual.Object(tc.va.Name)
			tc.want.Volume, tc.want.Node, tc.want.VolumeAttachment, tc.want.UID, tc.want.Seen = vol, "node-1", tc.va.Name, tc.va.UID, true
			// The PV lists no access modes: nothing to check, so several nodes may share it.
			tc.want.MultiAttach = true
			if !ok || got != tc.want {
				t.Errorf("attachment = %+v, %v, want %+v", got, ok, tc.want)
			}
		})
	}
}

// TestTheCacheProbeIsNoAttachment: the cache probe, handled by the event
// handlers or held by the informer at the periodic pass, is recorded as no
// attachment, not even one whose volume is unknown.
func TestTheCacheProbeIsNoAttachment(t *testing.T) {
	pv := "attachdetach-controller-cache-probe"
	probe := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: attachments.CacheProbe, UID: "uid-probe", ResourceVersion: "5"},
		Spec:       storagev1.VolumeAttachmentSpec{Attacher: "cache-probe.attachdetach-controller.invalid", NodeName: "cache-probe.attachdetach-controller.invalid", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}},
	}
	h := newHarness(t, probe)
	h.recorder.Observe(t.Context(), probe)
	if names := h.actual.ObjectNames(); len(names) != 0 {
		t.Errorf("after the event, the actual state records %v, want nothing", names)
	}
	h = newHarness(t, probe)
	if err := h.recorder.Reconcile(t.Context()); err != nil {
		t.Fatal(err)
	}
	if names := h.actual.ObjectNames(); len(names) != 0 {
		t.Errorf("after the periodic pass, the actual state records %v, want nothing", names)
	}
}
