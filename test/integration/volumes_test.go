package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/csivolume"
)

// TestAttachNotRequired: a CSIDriver with attachRequired: false gets no
// VolumeAttachment; flipping it to true attaches at once.
func TestAttachNotRequired(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	driver := &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: s.driver},
		Spec:       storagev1.CSIDriverSpec{AttachRequired: ptr.To(false)},
	}
	_, err := s.client.StorageV1().CSIDrivers().Create(s.ctx, driver, metav1.CreateOptions{})
	s.must(err)
	t.Cleanup(func() {
		_ = s.client.StorageV1().CSIDrivers().Delete(context.Background(), s.driver, metav1.DeleteOptions{})
	})
	vol := s.createVolume("data", volumeOptions{})
	s.createPod("app", s.nodes[0], vol.claim)
	s.never(2*time.Second, "a VolumeAttachment for a driver that needs no attach", func() bool { return s.vaExists(vol, s.nodes[0]) })

	s.must(s.client.StorageV1().CSIDrivers().Delete(s.ctx, s.driver, metav1.DeleteOptions{}))
	s.waitAttached(vol, s.nodes[0])
}

// TestUnmanagedNode: a node without the controller-managed annotation is kubelet's
// business: nothing is attached there.
func TestUnmanagedNode(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	node := "unmanaged-" + s.ns
	_, err := s.client.CoreV1().Nodes().Create(s.ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	s.must(err)
	t.Cleanup(func() { _ = s.client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	vol := s.createVolume("data", volumeOptions{})
	s.createPod("app", node, vol.claim)
	s.never(2*time.Second, "a VolumeAttachment on an unmanaged node", func() bool { return s.vaExists(vol, node) })
	s.must(s.client.CoreV1().Pods(s.ns).Delete(s.ctx, "app", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
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
		pod := s.podSpec(podName, s.nodes[0])
		pod.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{
			VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{Spec: v1.PersistentVolumeClaimSpec{
				AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
				Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
			}},
		}}}}
		created, err := s.client.CoreV1().Pods(s.ns).Create(s.ctx, pod, metav1.CreateOptions{})
		s.must(err)
		claimName := podName + "-scratch"
		claim := &v1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: claimName},
			Spec: v1.PersistentVolumeClaimSpec{
				AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
				VolumeName:  s.ns + "-" + claimName,
				Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		if owned {
			claim.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: podName, UID: created.UID, Controller: ptr.To(true)}}
		}
		c, err := s.client.CoreV1().PersistentVolumeClaims(s.ns).Create(s.ctx, claim, metav1.CreateOptions{})
		s.must(err)
		c.Status.Phase = v1.ClaimBound
		_, err = s.client.CoreV1().PersistentVolumeClaims(s.ns).UpdateStatus(s.ctx, c, metav1.UpdateOptions{})
		s.must(err)
		vol := volume{pv: s.ns + "-" + claimName, claim: claimName, handle: s.ns + "-" + claimName}
		vol.unique = csivolume.NewUniqueName(s.driver, vol.handle)
		s.createPV(vol, []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}, string(c.UID))
		if owned {
			s.waitAttached(vol, s.nodes[0])
		} else {
			s.never(2*time.Second, "a VolumeAttachment for a claim the pod does not own", func() bool { return s.vaExists(vol, s.nodes[0]) })
		}
		s.must(s.client.CoreV1().Pods(s.ns).Delete(s.ctx, podName, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	}
}

// TestClaimRefUIDMismatch: a PV whose claimRef names another incarnation of the
// claim is not attached.
func TestClaimRefUIDMismatch(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	vol := s.createVolume("data", volumeOptions{claimUID: "00000000-0000-0000-0000-000000000000"})
	s.createPod("app", s.nodes[0], vol.claim)
	s.never(2*time.Second, "a VolumeAttachment for a PV bound to another claim", func() bool { return s.vaExists(vol, s.nodes[0]) })
	s.must(s.client.CoreV1().Pods(s.ns).Delete(s.ctx, "app", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
}

// TestPVCreatedAfterPod: the PV appears after the claim and its pod exist; the
// volume is attached at once, not on a periodic pass.
func TestPVCreatedAfterPod(t *testing.T) {
	s := newScenario(t, scenarioOptions{controllerArgs: []string{"--disable-attach-detach-reconcile-sync"}})
	vol := s.createVolume("late", volumeOptions{noPV: true})
	s.createPod("app", s.nodes[0], vol.claim)
	time.Sleep(500 * time.Millisecond)
	claim, err := s.client.CoreV1().PersistentVolumeClaims(s.ns).Get(s.ctx, vol.claim, metav1.GetOptions{})
	s.must(err)
	s.createPV(vol, []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}, string(claim.UID))
	s.eventuallyWithin(5*time.Second, "the volume attached after its PV appeared", func() bool { return s.inNodeStatus(s.nodes[0], vol) })
}

// TestNodeCreatedAfterPods: pods scheduled to a node that does not exist yet get
// their volumes once the node appears.
func TestNodeCreatedAfterPods(t *testing.T) {
	s := newScenario(t, scenarioOptions{controllerArgs: []string{"--disable-attach-detach-reconcile-sync"}})
	node := "late-" + s.ns
	vol := s.createVolume("data", volumeOptions{})
	s.createPod("app", node, vol.claim)
	s.never(time.Second, "a VolumeAttachment on a node that does not exist", func() bool { return s.vaExists(vol, node) })
	_, err := sim.StartKubelet(s.ctx, env.AdminConfig(), sim.KubeletOptions{Nodes: []string{node}, CreateNodes: true, ManagePods: true})
	s.must(err)
	s.eventuallyWithin(5*time.Second, "the volume attached to the new node", func() bool { return s.inNodeStatus(node, vol) })
	s.must(s.client.CoreV1().Pods(s.ns).Delete(s.ctx, "app", metav1.DeleteOptions{}))
	s.waitDetached(vol, node)
}

// TestVolumeHandleWithCaret: a handle containing '^' attaches and, unlike
// upstream, detaches.
func TestVolumeHandleWithCaret(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	vol := s.createVolume("caret", volumeOptions{handle: "pool^" + s.ns + "^disk"})
	if !strings.HasSuffix(string(vol.unique), "^pool^"+s.ns+"^disk") {
		t.Fatalf("unique name %s", vol.unique)
	}
	s.createPod("app", s.nodes[0], vol.claim)
	s.waitAttached(vol, s.nodes[0])
	s.deletePod("app")
	s.waitDetached(vol, s.nodes[0])
}

// TestMigratedInTreeVolumes: an in-tree gcePersistentDisk PV and an inline
// gcePersistentDisk volume are translated to the PD CSI driver; the inline one's
// VolumeAttachment carries the translated spec.
func TestMigratedInTreeVolumes(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	const pdDriver = "pd.csi.storage.gke.io"
	_, err := sim.StartAttacher(s.ctx, env.AdminConfig(), sim.AttacherOptions{Drivers: []string{pdDriver}})
	s.must(err)
	node := s.nodes[0]

	claim := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "gce"},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			VolumeName:  s.ns + "-gce",
			Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	c, err := s.client.CoreV1().PersistentVolumeClaims(s.ns).Create(s.ctx, claim, metav1.CreateOptions{})
	s.must(err)
	c.Status.Phase = v1.ClaimBound
	_, err = s.client.CoreV1().PersistentVolumeClaims(s.ns).UpdateStatus(s.ctx, c, metav1.UpdateOptions{})
	s.must(err)
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: s.ns + "-gce"},
		Spec: v1.PersistentVolumeSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Capacity:    v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			ClaimRef:    &v1.ObjectReference{Namespace: s.ns, Name: "gce", UID: c.UID},
			PersistentVolumeSource: v1.PersistentVolumeSource{
				GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{PDName: s.ns + "-disk"},
			},
		},
	}
	_, err = s.client.CoreV1().PersistentVolumes().Create(s.ctx, pv, metav1.CreateOptions{})
	s.must(err)
	pod := s.podSpec("gce-app", node)
	pod.Spec.Volumes = []v1.Volume{
		{Name: "pv", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "gce"}}},
		{Name: "inline", VolumeSource: v1.VolumeSource{GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{PDName: s.ns + "-inline"}}},
	}
	s.createPodObject(pod)

	pvHandle := "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/" + s.ns + "-disk"
	inlineHandle := "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/" + s.ns + "-inline"
	pvVol := volume{pv: pv.Name, handle: pvHandle, unique: csivolume.NewUniqueName(pdDriver, pvHandle)}
	inlineVol := volume{handle: inlineHandle, unique: csivolume.NewUniqueName(pdDriver, inlineHandle)}
	s.eventually("both in-tree volumes in node status", func() bool {
		return s.inNodeStatus(node, pvVol) && s.inNodeStatus(node, inlineVol)
	})
	pvVA, err := s.client.StorageV1().VolumeAttachments().Get(s.ctx, csivolume.AttachmentName(pvHandle, pdDriver, node), metav1.GetOptions{})
	s.must(err)
	if pvVA.Spec.Attacher != pdDriver || pvVA.Spec.Source.PersistentVolumeName == nil || *pvVA.Spec.Source.PersistentVolumeName != pv.Name {
		t.Fatalf("VolumeAttachment of the migrated PV: %+v", pvVA.Spec)
	}
	inlineVA, err := s.client.StorageV1().VolumeAttachments().Get(s.ctx, csivolume.AttachmentName(inlineHandle, pdDriver, node), metav1.GetOptions{})
	s.must(err)
	spec := inlineVA.Spec.Source.InlineVolumeSpec
	if spec == nil || spec.CSI == nil || spec.CSI.Driver != pdDriver || spec.CSI.VolumeHandle != inlineHandle || inlineVA.Spec.Source.PersistentVolumeName != nil {
		t.Fatalf("VolumeAttachment of the inline volume: %+v", inlineVA.Spec.Source)
	}
	s.must(s.client.CoreV1().Pods(s.ns).Delete(s.ctx, "gce-app", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	s.eventually("the in-tree volumes detached", func() bool {
		_, err1 := s.client.StorageV1().VolumeAttachments().Get(context.Background(), pvVA.Name, metav1.GetOptions{})
		_, err2 := s.client.StorageV1().VolumeAttachments().Get(context.Background(), inlineVA.Name, metav1.GetOptions{})
		return err1 != nil && err2 != nil
	})
}
