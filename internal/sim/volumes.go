package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"

	corev1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	csitranslation "k8s.io/csi-translation-lib"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/internal/safetyrules"
)

// ControllerManagedAnnotation on a Node tells kubelet that attach/detach is done by a
// controller, not by kubelet.
const ControllerManagedAnnotation = "volumes.kubernetes.io/controller-managed-attach-detach"

// UniqueVolumeName is the name kubelet and the controller use for a CSI volume in
// node.status.volumesAttached and node.status.volumesInUse.
func UniqueVolumeName(driver, volumeHandle string) string {
	return "kubernetes.io/csi/" + driver + "^" + volumeHandle
}

// AttachmentName is the name of the VolumeAttachment of a CSI volume on a node:
// csi-<sha256 of handle, driver and node name>, as kubelet and the external-attacher
// expect it.
func AttachmentName(driver, volumeHandle, node string) string {
	sum := sha256.Sum256([]byte(volumeHandle + driver + node))
	return "csi-" + hex.EncodeToString(sum[:])
}

var notFinalizerSafe = regexp.MustCompile(`[^a-zA-Z0-9-]`)

// AttacherFinalizer is the finalizer the CSI external-attacher of driver puts on the
// VolumeAttachments it handles.
func AttacherFinalizer(driver string) string {
	return "external-attacher/" + notFinalizerSafe.ReplaceAllString(driver, "-")
}

var translator = csitranslation.New()

// CSISource returns the CSI source of a PersistentVolume, translating an in-tree
// source that has a CSI migration; nil for anything else.
func CSISource(pv *corev1.PersistentVolume) *corev1.CSIPersistentVolumeSource {
	if csi := AsCSI(pv); csi != nil {
		return csi.Spec.CSI
	}
	return nil
}

// AsCSI returns the PersistentVolume as the attach/detach controller judges it: a
// CSI one as it is, an in-tree one that has a CSI migration as csi-translation-lib
// translates it (its access modes may differ: a gcePersistentDisk marked
// ReadWriteMany becomes ReadWriteOnce); nil for anything else.
func AsCSI(pv *corev1.PersistentVolume) *corev1.PersistentVolume {
	if pv.Spec.CSI != nil {
		return pv
	}
	if !translator.IsPVMigratable(pv) {
		return nil
	}
	translated, err := translator.TranslateInTreePVToCSI(klog.Background(), pv)
	if err != nil || translated.Spec.CSI == nil {
		return nil
	}
	return translated
}

// Volume is a volume a pod uses that may need attaching: a CSI volume, or an
// in-tree iSCSI or Fibre Channel volume, which kubelet attaches itself once node
// status lists it.
type Volume struct {
	// PV is the PersistentVolume's name; empty for a volume inline in the pod.
	PV string
	// Name is the unique name node status and kubelet know it by.
	Name string
	// Driver and Handle are a CSI volume's; both empty for an in-tree volume.
	Driver, Handle string
	// SingleAttach: its PV lists access modes that allow no second node. An
	// inline volume is never single-attach: nothing checks it.
	SingleAttach bool
}

// ReportOnly tells whether the volume is an in-tree iSCSI or Fibre Channel
// volume: attached by node status listing it, with no VolumeAttachment.
func (v Volume) ReportOnly() bool { return v.Driver == "" }

// ISCSIVolumeName is kubelet's name of an iSCSI volume.
func ISCSIVolumeName(targetPortal, iqn string, lun int32) string {
	return fmt.Sprintf("kubernetes.io/iscsi/%s:%s:%d", targetPortal, iqn, lun)
}

// FCVolumeName is kubelet's name of a Fibre Channel volume: by target WWNs and
// LUN when the source has both, else by WWIDs; empty when it has neither.
func FCVolumeName(src *corev1.FCVolumeSource) string {
	switch {
	case len(src.TargetWWNs) > 0 && src.Lun != nil:
		return fmt.Sprintf("kubernetes.io/fc/%v:%d", src.TargetWWNs, *src.Lun)
	case len(src.WWIDs) > 0:
		return fmt.Sprintf("kubernetes.io/fc/%v", src.WWIDs)
	}
	return ""
}

// PVVolume returns the volume of a PersistentVolume, if it is a CSI volume, an
// in-tree one with a CSI migration (judged by its translation, as the controller
// judges it), or an iSCSI or Fibre Channel volume.
func PVVolume(pv *corev1.PersistentVolume) (Volume, bool) {
	if csi := AsCSI(pv); csi != nil {
		src := csi.Spec.CSI
		return Volume{
			PV: pv.Name, Name: UniqueVolumeName(src.Driver, src.VolumeHandle), Driver: src.Driver, Handle: src.VolumeHandle,
			SingleAttach: safetyrules.SingleAttach(csi.Spec.AccessModes),
		}, true
	}
	v := Volume{PV: pv.Name, SingleAttach: safetyrules.SingleAttach(pv.Spec.AccessModes)}
	switch src := pv.Spec.PersistentVolumeSource; {
	case src.ISCSI != nil:
		v.Name = ISCSIVolumeName(src.ISCSI.TargetPortal, src.ISCSI.IQN, src.ISCSI.Lun)
	case src.FC != nil:
		v.Name = FCVolumeName(src.FC)
	}
	return v, v.Name != ""
}

// inlineInTreeName is kubelet's name of an iSCSI or Fibre Channel volume inline in
// a pod; empty for any other volume.
func inlineInTreeName(vol *corev1.Volume) string {
	switch {
	case vol.ISCSI != nil:
		return ISCSIVolumeName(vol.ISCSI.TargetPortal, vol.ISCSI.IQN, vol.ISCSI.Lun)
	case vol.FC != nil:
		return FCVolumeName(vol.FC)
	}
	return ""
}

// podClaims returns the namespace/name keys of the PVCs a pod's volumes go through.
func podClaims(pod *corev1.Pod) []string {
	var claims []string
	for _, vol := range pod.Spec.Volumes {
		if claim := claimName(pod, &vol); claim != "" {
			claims = append(claims, pod.Namespace+"/"+claim)
		}
	}
	return claims
}

// claimName is the name of the PVC a pod's volume goes through; empty if none.
func claimName(pod *corev1.Pod, vol *corev1.Volume) string {
	switch {
	case vol.PersistentVolumeClaim != nil:
		return vol.PersistentVolumeClaim.ClaimName
	case vol.Ephemeral != nil:
		return pod.Name + "-" + vol.Name
	}
	return ""
}

// Objects finds the claims and PersistentVolumes behind a pod's volumes.
type Objects struct {
	Claim func(namespace, name string) (*corev1.PersistentVolumeClaim, bool)
	PV    func(name string) (*corev1.PersistentVolume, bool)
}

// PodVolumes returns the volumes a pod uses that may need attaching and are
// resolved by now, and how many claims are not: a claim resolves once it is bound
// and its PV exists.
func (o Objects) PodVolumes(pod *corev1.Pod) (vols []Volume, unresolved int, err error) {
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		if name := inlineInTreeName(vol); name != "" {
			vols = append(vols, Volume{Name: name})
			continue
		}
		if translator.IsInlineMigratable(vol) {
			pv, err := translator.TranslateInTreeInlineVolumeToCSI(klog.Background(), vol, pod.Namespace)
			if err != nil {
				return nil, 0, fmt.Errorf("translating inline volume %q of pod %s/%s: %w", vol.Name, pod.Namespace, pod.Name, err)
			}
			if src := pv.Spec.CSI; src != nil {
				vols = append(vols, Volume{Name: UniqueVolumeName(src.Driver, src.VolumeHandle), Driver: src.Driver, Handle: src.VolumeHandle})
			}
			continue
		}
		claim := claimName(pod, vol)
		if claim == "" {
			continue
		}
		pvc, ok := o.Claim(pod.Namespace, claim)
		if !ok || pvc.Spec.VolumeName == "" {
			unresolved++
			continue
		}
		pv, ok := o.PV(pvc.Spec.VolumeName)
		if !ok {
			unresolved++
			continue
		}
		if v, ok := PVVolume(pv); ok {
			vols = append(vols, v)
		}
	}
	return vols, unresolved, nil
}

// listerObjects finds claims and PersistentVolumes in informer caches.
func listerObjects(pvcs corelisters.PersistentVolumeClaimLister, pvs corelisters.PersistentVolumeLister) Objects {
	return Objects{
		Claim: func(namespace, name string) (*corev1.PersistentVolumeClaim, bool) {
			pvc, err := pvcs.PersistentVolumeClaims(namespace).Get(name)
			return pvc, err == nil
		},
		PV: func(name string) (*corev1.PersistentVolume, bool) {
			pv, err := pvs.Get(name)
			return pv, err == nil
		},
	}
}

// PodTerminated tells whether a pod no longer needs its volumes: it finished, or it
// was deleted and none of its containers runs any more.
func PodTerminated(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return true
	}
	if pod.DeletionTimestamp == nil {
		return false
	}
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, s := range statuses {
			if s.State.Running != nil {
				return false
			}
		}
	}
	return true
}
