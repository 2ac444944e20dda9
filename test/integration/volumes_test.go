package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

// TestAttachNotRequired: a CSIDriver with attachRequired: false gets no
// VolumeAttachment; flipping it to true attaches at once.
func TestAttachNotRequired(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	driver := &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: s.Driver},
		Spec:       storagev1.CSIDriverSpec{AttachRequired: ptr.To(false)},
	}
	_, err := s.Client.StorageV1().CSIDrivers().Create(t.Context(), driver, metav1.CreateOptions{})
	s.Must(err)
	t.Cleanup(func() {
		_ = s.Client.StorageV1().CSIDrivers().Delete(context.Background(), s.Driver, metav1.DeleteOptions{})
	})
	vol := s.CreateVolume("data", workload.VolumeOptions{})
	s.CreatePod("app", s.Nodes[0], vol.Claim)
	s.Never(2*time.Second, "a VolumeAttachment for a driver that needs no attach", func() bool { return s.HasAttachment(vol, s.Nodes[0]) })

	s.Must(s.Client.StorageV1().CSIDrivers().Delete(t.Context(), s.Driver, metav1.DeleteOptions{}))
	s.WaitAttached(vol, s.Nodes[0])
}

// TestUnmanagedNode: a node without the controller-managed annotation is kubelet's
// business: nothing is attached there.
func TestUnmanagedNode(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	node := "unmanaged-" + s.Namespace
	_, err := s.Client.CoreV1().Nodes().Create(t.Context(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	s.Must(err)
	t.Cleanup(func() { _ = s.Client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	vol := s.CreateVolume("data", workload.VolumeOptions{})
	s.CreatePod("app", node, vol.Claim)
	s.Never(2*time.Second, "a VolumeAttachment on an unmanaged node", func() bool { return s.HasAttachment(vol, node) })
	s.DeletePodNow("app")
}

// TestGenericEphemeralVolume: the claim <pod>-<volume> owned by the pod is followed
// to its PV; a claim of that name not owned by the pod is not.
func TestGenericEphemeralVolume(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	for _, owned := range []bool{true, false} {
		podName := "eph-owned"
		if !owned {
			podName = "eph-foreign"
		}
		pod := s.Pod(podName, s.Nodes[0])
		pod.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{
			VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{Spec: v1.PersistentVolumeClaimSpec{
				AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
				Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
			}},
		}}}}
		created, err := s.Client.CoreV1().Pods(s.Namespace).Create(t.Context(), pod, metav1.CreateOptions{})
		s.Must(err)
		claimName := podName + "-scratch"
		claim := &v1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: claimName},
			Spec: v1.PersistentVolumeClaimSpec{
				AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
				VolumeName:  s.Namespace + "-" + claimName,
				Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		if owned {
			claim.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: podName, UID: created.UID, Controller: ptr.To(true)}}
		}
		c, err := s.Client.CoreV1().PersistentVolumeClaims(s.Namespace).Create(t.Context(), claim, metav1.CreateOptions{})
		s.Must(err)
		c.Status.Phase = v1.ClaimBound
		_, err = s.Client.CoreV1().PersistentVolumeClaims(s.Namespace).UpdateStatus(t.Context(), c, metav1.UpdateOptions{})
		s.Must(err)
		vol := s.NewVolume(claimName, workload.VolumeOptions{})
		s.CreatePV(vol, c.UID)
		if owned {
			s.WaitAttached(vol, s.Nodes[0])
		} else {
			s.Never(2*time.Second, "a VolumeAttachment for a claim the pod does not own", func() bool { return s.HasAttachment(vol, s.Nodes[0]) })
		}
		s.DeletePodNow(podName)
	}
}

// TestClaimRefUIDMismatch: a PV whose claimRef names another incarnation of the
// claim is not attached; once the PV changes to name this one, the volume is
// attached at once, not on a periodic pass.
func TestClaimRefUIDMismatch(t *testing.T) {
	s := newScenario(t, scenarioOptions{controllerArgs: []string{"--disable-attach-detach-reconcile-sync"}})
	vol := s.CreateVolume("data", workload.VolumeOptions{ClaimUID: "00000000-0000-0000-0000-000000000000"})
	s.CreatePod("app", s.Nodes[0], vol.Claim)
	s.Never(2*time.Second, "a VolumeAttachment for a PV bound to another claim", func() bool { return s.HasAttachment(vol, s.Nodes[0]) })

	claim, err := s.Client.CoreV1().PersistentVolumeClaims(s.Namespace).Get(t.Context(), vol.Claim, metav1.GetOptions{})
	s.Must(err)
	patch := fmt.Appendf(nil, `{"spec":{"claimRef":{"uid":%q}}}`, claim.UID)
	_, err = s.Client.CoreV1().PersistentVolumes().Patch(t.Context(), vol.PV, types.MergePatchType, patch, metav1.PatchOptions{})
	s.Must(err)
	suite.Eventually(t, 5*time.Second, "the volume attached once its PV names the claim", func() bool { return s.InNodeStatus(s.Nodes[0], vol) })
}

// TestPVCreatedAfterPod: the PV appears after the claim and its pod exist; the
// volume is attached at once, not on a periodic pass.
func TestPVCreatedAfterPod(t *testing.T) {
	s := newScenario(t, scenarioOptions{controllerArgs: []string{"--disable-attach-detach-reconcile-sync"}})
	vol := s.CreateVolume("late", workload.VolumeOptions{NoPV: true})
	s.CreatePod("app", s.Nodes[0], vol.Claim)
	time.Sleep(500 * time.Millisecond)
	claim, err := s.Client.CoreV1().PersistentVolumeClaims(s.Namespace).Get(t.Context(), vol.Claim, metav1.GetOptions{})
	s.Must(err)
	s.CreatePV(vol, claim.UID)
	suite.Eventually(t, 5*time.Second, "the volume attached after its PV appeared", func() bool { return s.InNodeStatus(s.Nodes[0], vol) })
}

// TestNodeCreatedAfterPods: pods scheduled to a node that does not exist yet get
// their volumes once the node appears.
func TestNodeCreatedAfterPods(t *testing.T) {
	s := newScenario(t, scenarioOptions{controllerArgs: []string{"--disable-attach-detach-reconcile-sync"}})
	node := "late-" + s.Namespace
	vol := s.CreateVolume("data", workload.VolumeOptions{})
	s.CreatePod("app", node, vol.Claim)
	s.Never(time.Second, "a VolumeAttachment on a node that does not exist", func() bool { return s.HasAttachment(vol, node) })
	_, err := sim.StartKubelet(t.Context(), env.AdminConfig(), sim.KubeletOptions{Nodes: []string{node}, CreateNodes: true, ManagePods: true})
	s.Must(err)
	suite.Eventually(t, 5*time.Second, "the volume attached to the new node", func() bool { return s.InNodeStatus(node, vol) })
	s.DeletePod("app")
	s.WaitDetached(vol, node)
}

// TestVolumeHandleWithCaret: a handle containing '^' attaches and, unlike
// upstream, detaches.
func TestVolumeHandleWithCaret(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	vol := s.CreateVolume("caret", workload.VolumeOptions{Handle: "pool^" + s.Namespace + "^disk"})
	if !strings.HasSuffix(vol.UniqueName(), "^pool^"+s.Namespace+"^disk") {
		t.Fatalf("unique name %s", vol.UniqueName())
	}
	s.CreatePod("app", s.Nodes[0], vol.Claim)
	s.WaitAttached(vol, s.Nodes[0])
	s.DeletePod("app")
	s.WaitDetached(vol, s.Nodes[0])
}

// TestMigratedInTreeVolumes: an in-tree gcePersistentDisk PV and an inline
// gcePersistentDisk volume are translated to the PD CSI driver; the inline one's
// VolumeAttachment carries the translated spec, and its event names it as
// kube-controller-manager does, by the translated PV's name.
func TestMigratedInTreeVolumes(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	const pdDriver = "pd.csi.storage.gke.io"
	_, err := sim.StartAttacher(t.Context(), env.AdminConfig(), sim.AttacherOptions{Drivers: []string{pdDriver}})
	s.Must(err)
	node := s.Nodes[0]

	claim := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: "gce"},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			VolumeName:  s.Namespace + "-gce",
			Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	c, err := s.Client.CoreV1().PersistentVolumeClaims(s.Namespace).Create(t.Context(), claim, metav1.CreateOptions{})
	s.Must(err)
	c.Status.Phase = v1.ClaimBound
	_, err = s.Client.CoreV1().PersistentVolumeClaims(s.Namespace).UpdateStatus(t.Context(), c, metav1.UpdateOptions{})
	s.Must(err)
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: s.Namespace + "-gce"},
		Spec: v1.PersistentVolumeSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Capacity:    v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			ClaimRef:    &v1.ObjectReference{Namespace: s.Namespace, Name: "gce", UID: c.UID},
			PersistentVolumeSource: v1.PersistentVolumeSource{
				GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{PDName: s.Namespace + "-disk"},
			},
		},
	}
	_, err = s.Client.CoreV1().PersistentVolumes().Create(t.Context(), pv, metav1.CreateOptions{})
	s.Must(err)
	pod := s.Pod("gce-app", node)
	pod.Spec.Volumes = []v1.Volume{
		{Name: "pv", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "gce"}}},
		{Name: "inline", VolumeSource: v1.VolumeSource{GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{PDName: s.Namespace + "-inline"}}},
	}
	s.CreatePodObject(pod)

	pvHandle := "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/" + s.Namespace + "-disk"
	inlineHandle := "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/" + s.Namespace + "-inline"
	pvVol := workload.Volume{PV: pv.Name, Driver: pdDriver, Handle: pvHandle}
	inlineVol := workload.Volume{Driver: pdDriver, Handle: inlineHandle}
	s.Eventually("both in-tree volumes in node status", func() bool {
		return s.InNodeStatus(node, pvVol) && s.InNodeStatus(node, inlineVol)
	})
	pvVA := s.Attachment(pvVol, node)
	if pvVA.Spec.Attacher != pdDriver || pvVA.Spec.Source.PersistentVolumeName == nil || *pvVA.Spec.Source.PersistentVolumeName != pv.Name {
		t.Fatalf("VolumeAttachment of the migrated PV: %+v", pvVA.Spec)
	}
	inlineVA := s.Attachment(inlineVol, node)
	spec := inlineVA.Spec.Source.InlineVolumeSpec
	if spec == nil || spec.CSI == nil || spec.CSI.Driver != pdDriver || spec.CSI.VolumeHandle != inlineHandle || inlineVA.Spec.Source.PersistentVolumeName != nil {
		t.Fatalf("VolumeAttachment of the inline volume: %+v", inlineVA.Spec.Source)
	}
	s.WaitEvent("gce-app", `Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "`+pv.Name+`" `)
	s.WaitEvent("gce-app", `Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "`+pdDriver+"-"+s.Namespace+`-inline" `)
	s.DeletePodNow("gce-app")
	s.Eventually("the in-tree volumes detached", func() bool {
		return !s.HasAttachment(pvVol, node) && !s.HasAttachment(inlineVol, node)
	})
}
