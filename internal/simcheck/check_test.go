package simcheck

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/attachdetach-controller/attachdetach-controller/internal/fakeapi"
	"github.com/attachdetach-controller/attachdetach-controller/internal/safetyrules"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
	"github.com/attachdetach-controller/attachdetach-controller/internal/simworld"
)

// cluster is a store whose every write the checker judges.
type cluster struct {
	t      *testing.T
	store  *fakeapi.Store
	mounts *sim.Mounts
}

func (c cluster) create(obj runtime.Object) {
	c.t.Helper()
	if _, err := c.store.Create("test", obj); err != nil {
		c.t.Fatal(err)
	}
}

func (c cluster) delete(ref fakeapi.Ref) {
	c.t.Helper()
	if err := c.store.Delete("test", ref); err != nil {
		c.t.Fatal(err)
	}
}

func (c cluster) setNode(name string, attached, inUse []string) {
	c.t.Helper()
	err := c.store.Mutate("test", fakeapi.Ref{Resource: fakeapi.Nodes, Name: name}, func(obj runtime.Object) bool {
		setStatus(obj.(*corev1.Node), attached, inUse)
		return true
	})
	if err != nil {
		c.t.Fatal(err)
	}
}

func setStatus(n *corev1.Node, attached, inUse []string) {
	n.Status.VolumesAttached, n.Status.VolumesInUse = nil, nil
	for _, v := range attached {
		n.Status.VolumesAttached = append(n.Status.VolumesAttached, corev1.AttachedVolume{Name: corev1.UniqueVolumeName(v)})
	}
	for _, v := range inUse {
		n.Status.VolumesInUse = append(n.Status.VolumesInUse, corev1.UniqueVolumeName(v))
	}
}

func readyNode(name string, attached, inUse []string, taints ...corev1.Taint) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Taints: taints}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	setStatus(n, attached, inUse)
	return n
}

func rwoPV(name string, src corev1.PersistentVolumeSource) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PersistentVolumeSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, PersistentVolumeSource: src},
	}
}

func attachment(name, pv, node string) *storagev1.VolumeAttachment {
	return &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: "csi.example.com", NodeName: node,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(pv)}},
	}
}

// TestEachRuleIsJudgedOnTheWritesThatCanBreakIt feeds every rule through the
// store's writes, as the simulation does.
func TestEachRuleIsJudgedOnTheWritesThatCanBreakIt(t *testing.T) {
	csi := rwoPV("pv-csi", corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "csi.example.com", VolumeHandle: "h"}})
	csiVol := sim.UniqueVolumeName("csi.example.com", "h")
	fc := rwoPV("pv-fc", corev1.PersistentVolumeSource{FC: &corev1.FCVolumeSource{TargetWWNs: []string{"500a0981891b8dc5"}, Lun: ptr.To[int32](0)}})
	fcVol := sim.FCVolumeName(fc.Spec.FC)
	outOfService := corev1.Taint{Key: simworld.OutOfServiceTaint, Effect: corev1.TaintEffectNoExecute}
	vaRef := func(name string) fakeapi.Ref { return fakeapi.Ref{Resource: fakeapi.VolumeAttachments, Name: name} }
	tests := []struct {
		name  string
		run   func(c cluster)
		wants []string
	}{
		{name: "rule 1: VolumeAttachments of a single-attach volume on two nodes", run: func(c cluster) {
			c.create(csi)
			c.create(attachment("va-a", "pv-csi", "node-a"))
			c.create(attachment("va-b", "pv-csi", "node-b"))
		}, wants: []string{"INVARIANT single-attach: single-attach volume PV pv-csi has VolumeAttachments on nodes node-a, node-b: va-a, va-b (by test)"}},
		{name: "rule 2: a VolumeAttachment deleted while mounted on a Ready node", run: func(c cluster) {
			c.create(csi)
			c.create(readyNode("node-a", []string{csiVol}, []string{csiVol}))
			c.create(attachment("va-a", "pv-csi", "node-a"))
			c.mounts.Set("node-a", csiVol, true)
			c.delete(vaRef("va-a"))
		}, wants: []string{"INVARIANT mounted-detach: VolumeAttachment va-a"}},
		{name: "rule 2: a VolumeAttachment deleted while mounted on an out-of-service node", run: func(c cluster) {
			c.create(csi)
			c.create(readyNode("node-a", []string{csiVol}, []string{csiVol}, outOfService))
			c.create(attachment("va-a", "pv-csi", "node-a"))
			c.mounts.Set("node-a", csiVol, true)
			c.delete(vaRef("va-a"))
		}},
		{name: "rule 2: an iSCSI or Fibre Channel volume taken off a node that has it mounted", run: func(c cluster) {
			c.create(fc)
			c.create(readyNode("node-a", []string{fcVol}, []string{fcVol}))
			c.mounts.Set("node-a", fcVol, true)
			c.setNode("node-a", nil, []string{fcVol})
		}, wants: []string{"INVARIANT mounted-detach: volume " + fcVol + " left the volumesAttached of node node-a"}},
		{name: "rule 3: a volume listed on a node while another has it mounted", run: func(c cluster) {
			c.create(fc)
			c.create(readyNode("node-b", []string{fcVol}, []string{fcVol}))
			c.mounts.Set("node-b", fcVol, true)
			c.create(readyNode("node-a", []string{fcVol}, nil))
		}, wants: []string{"INVARIANT single-attach: single-attach volume " + fcVol + " (PV pv-fc) listed in the volumesAttached of node node-a while kubelet on node-b"}},
		{name: "rule 3: a kubelet gains the chance to mount a volume listed on another node", run: func(c cluster) {
			c.create(fc)
			c.create(readyNode("node-b", []string{fcVol}, nil))
			c.create(readyNode("node-a", []string{fcVol}, nil))
			c.setNode("node-a", []string{fcVol}, []string{fcVol})
		}, wants: []string{"INVARIANT single-attach: kubelet on node-a may mount single-attach volume " + fcVol + " (PV pv-fc) while node node-b lists it"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			mounts := sim.NewMounts()
			c := New(safetyrules.Settings{MaxWait: time.Minute, Grace: time.Second}, mounts, func(msg string) { got = append(got, msg) })
			tc.run(cluster{t: t, store: fakeapi.NewStore(c.Observe), mounts: mounts})
			if len(got) != len(tc.wants) {
				t.Fatalf("violations %q, want %d", got, len(tc.wants))
			}
			for i, want := range tc.wants {
				if !strings.HasPrefix(got[i], want) {
					t.Errorf("violation %q, want it to begin %q", got[i], want)
				}
			}
		})
	}
}
