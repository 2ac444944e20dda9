package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	csitranslation "k8s.io/csi-translation-lib"
	"k8s.io/klog/v2"
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

// podVolume is a volume a pod uses that may need attaching: a CSI volume of
// driver, or an in-tree iSCSI or Fibre Channel volume (no driver), which kubelet
// attaches itself once node status lists it.
type podVolume struct {
	name, driver string
}

func csiVolume(driver, handle string) podVolume {
	return podVolume{name: UniqueVolumeName(driver, handle), driver: driver}
}

func (v podVolume) uniqueName() string { return v.name }

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

// fcVolume returns the Fibre Channel volume of a source that kubelet can name.
func fcVolume(src *corev1.FCVolumeSource) (podVolume, bool) {
	name := FCVolumeName(src)
	return podVolume{name: name}, name != ""
}

// inlineInTreeVolume returns the iSCSI or Fibre Channel volume inline in a pod.
func inlineInTreeVolume(vol *corev1.Volume) (podVolume, bool) {
	switch {
	case vol.ISCSI != nil:
		return podVolume{name: ISCSIVolumeName(vol.ISCSI.TargetPortal, vol.ISCSI.IQN, vol.ISCSI.Lun)}, true
	case vol.FC != nil:
		return fcVolume(vol.FC)
	}
	return podVolume{}, false
}

// pvInTreeVolume returns the iSCSI or Fibre Channel volume of a PersistentVolume.
func pvInTreeVolume(pv *corev1.PersistentVolume) (podVolume, bool) {
	switch {
	case pv.Spec.ISCSI != nil:
		return podVolume{name: ISCSIVolumeName(pv.Spec.ISCSI.TargetPortal, pv.Spec.ISCSI.IQN, pv.Spec.ISCSI.Lun)}, true
	case pv.Spec.FC != nil:
		return fcVolume(pv.Spec.FC)
	}
	return podVolume{}, false
}

// podClaims returns the namespace/name keys of the PVCs a pod's volumes go through.
func podClaims(pod *corev1.Pod) []string {
	var claims []string
	for _, vol := range pod.Spec.Volumes {
		switch {
		case vol.PersistentVolumeClaim != nil:
			claims = append(claims, pod.Namespace+"/"+vol.PersistentVolumeClaim.ClaimName)
		case vol.Ephemeral != nil:
			claims = append(claims, pod.Namespace+"/"+pod.Name+"-"+vol.Name)
		}
	}
	return claims
}

// resolver finds the attachable volumes behind a pod's volumes through the informer caches.
type resolver struct {
	pvcs corelisters.PersistentVolumeClaimLister
	pvs  corelisters.PersistentVolumeLister
}

// podVolumes returns the attachable volumes a pod uses that are resolved by now, and how many
// claims are not: a claim resolves once it is bound and its PV is known.
func (r resolver) podVolumes(pod *corev1.Pod) (vols []podVolume, unresolved int, err error) {
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		var claim string
		switch {
		case vol.PersistentVolumeClaim != nil:
			claim = vol.PersistentVolumeClaim.ClaimName
		case vol.Ephemeral != nil:
			claim = pod.Name + "-" + vol.Name
		case vol.ISCSI != nil || vol.FC != nil:
			if v, ok := inlineInTreeVolume(vol); ok {
				vols = append(vols, v)
			}
			continue
		case translator.IsInlineMigratable(vol):
			pv, err := translator.TranslateInTreeInlineVolumeToCSI(klog.Background(), vol, pod.Namespace)
			if err != nil {
				return nil, 0, fmt.Errorf("translating inline volume %q of pod %s/%s: %w", vol.Name, pod.Namespace, pod.Name, err)
			}
			if pv.Spec.CSI != nil {
				vols = append(vols, csiVolume(pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle))
			}
			continue
		default:
			continue
		}
		pvc, err := r.pvcs.PersistentVolumeClaims(pod.Namespace).Get(claim)
		if apierrors.IsNotFound(err) || (err == nil && pvc.Spec.VolumeName == "") {
			unresolved++
			continue
		}
		if err != nil {
			return nil, 0, fmt.Errorf("reading claim %s/%s: %w", pod.Namespace, claim, err)
		}
		pv, err := r.pvs.Get(pvc.Spec.VolumeName)
		if apierrors.IsNotFound(err) {
			unresolved++
			continue
		}
		if err != nil {
			return nil, 0, fmt.Errorf("reading volume %s: %w", pvc.Spec.VolumeName, err)
		}
		if src := CSISource(pv); src != nil {
			vols = append(vols, csiVolume(src.Driver, src.VolumeHandle))
		} else if v, ok := pvInTreeVolume(pv); ok {
			vols = append(vols, v)
		}
	}
	return vols, unresolved, nil
}

// podTerminated tells whether a pod no longer needs its volumes: it finished, or it
// was deleted and none of its containers runs any more.
func podTerminated(pod *corev1.Pod) bool {
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

// clientConfig returns a copy of cfg with the simulator's user agent.
func clientConfig(cfg *rest.Config, userAgent string) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = userAgent
	}
	return cfg
}
