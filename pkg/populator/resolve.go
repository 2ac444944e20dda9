package populator

import (
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/storage/ephemeral"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// Resolution is what one volume of a pod comes to.
type Resolution struct {
	// PodVolume is the volume's name in the pod.
	PodVolume string
	// Volume is the attachable volume, when Attachable.
	Volume     cache.Volume
	Attachable bool
	// NotAttachedBecause says, for a volume of a CSI driver, why it needs no
	// attaching; empty otherwise.
	NotAttachedBecause string
	// Err says why the volume cannot be resolved yet (claim not bound, PV
	// missing...).
	Err error
}

// Needed tells whether the volume must be attached to the pod's node.
func (r Resolution) Needed() bool { return r.Err == nil && r.Attachable && r.NotAttachedBecause == "" }

// Resolve returns what each volume of the pod comes to, in the pod's order: the
// rules the desired state is built with, for explaining them.
func (p *Populator) Resolve(logger klog.Logger, pod *v1.Pod) []Resolution {
	out := make([]Resolution, 0, len(pod.Spec.Volumes))
	for i := range pod.Spec.Volumes {
		podVol := &pod.Spec.Volumes[i]
		r := Resolution{PodVolume: podVol.Name}
		r.Volume, r.Attachable, r.Err = p.resolve(logger, pod, podVol)
		if r.Err == nil && r.Attachable {
			r.NotAttachedBecause = p.DriverNeedsNoAttach(r.Volume)
		}
		out = append(out, r)
	}
	return out
}

// podVolumes returns the attachable volumes the pod needs, and every CSI driver its
// volumes use (attachable or not), so that a CSIDriver change finds the pod. A
// volume that cannot be resolved yet (claim not bound, PV missing) is left out and
// logged; the event that completes it re-evaluates the pod.
func (p *Populator) podVolumes(logger klog.Logger, pod *v1.Pod) ([]cache.Volume, []string) {
	var vols []cache.Volume
	var drivers []string
	for _, r := range p.Resolve(logger, pod) {
		if r.Err != nil {
			logger.V(2).Info("Volume not attachable yet", "volume", r.PodVolume, "reason", r.Err.Error())
			continue
		}
		if r.Attachable && r.Volume.Driver != "" && !slices.Contains(drivers, r.Volume.Driver) {
			drivers = append(drivers, r.Volume.Driver)
		}
		if r.Needed() {
			vols = append(vols, r.Volume)
		}
	}
	return vols, drivers
}

// resolve turns one pod volume into an attachable volume: a CSI volume, or an
// in-tree iSCSI or Fibre Channel volume. ok is false for a volume that never needs
// attaching (secrets, NFS, CSI ephemeral volumes...).
func (p *Populator) resolve(logger klog.Logger, pod *v1.Pod, podVol *v1.Volume) (cache.Volume, bool, error) {
	switch {
	case podVol.PersistentVolumeClaim != nil || podVol.Ephemeral != nil:
		pv, err := p.claimedPV(pod, podVol)
		if err != nil {
			return cache.Volume{}, false, err
		}
		return p.fromPV(logger, pv)
	case podVol.CSI != nil:
		return cache.Volume{}, false, nil
	case podVol.ISCSI != nil:
		src := podVol.ISCSI
		return inTree(volumename.ISCSI(src.TargetPortal, src.IQN, src.Lun), podVol.Name, "", true), true, nil
	case podVol.FC != nil:
		src := podVol.FC
		name, err := volumename.FC(src.TargetWWNs, src.Lun, src.WWIDs)
		if err != nil {
			return cache.Volume{}, false, err
		}
		return inTree(name, podVol.Name, "", true), true, nil
	case p.translator.IsInlineMigratable(podVol):
		pv, err := p.translator.TranslateInTreeInlineVolumeToCSI(logger, podVol, pod.Namespace)
		if err != nil {
			return cache.Volume{}, false, fmt.Errorf("translating in-tree inline volume to CSI: %w", err)
		}
		if pv.Spec.CSI == nil {
			return cache.Volume{}, false, fmt.Errorf("translation of in-tree inline volume gave no CSI source")
		}
		// The name CSI migration gives the translated PV is what
		// kube-controller-manager's events call a migrated inline volume.
		spec := pv.Spec
		return cache.Volume{
			Name:        volumename.CSI(spec.CSI.Driver, spec.CSI.VolumeHandle),
			Driver:      spec.CSI.Driver,
			Handle:      spec.CSI.VolumeHandle,
			InlineSpec:  &spec,
			DisplayName: pv.Name,
			MultiAttach: volumename.MultiAttachAllowed(spec.AccessModes),
			Migrated:    true,
		}, true, nil
	}
	return cache.Volume{}, false, nil
}

// claimedPV follows a claim, or a generic ephemeral volume's claim, to its bound PV.
func (p *Populator) claimedPV(pod *v1.Pod, podVol *v1.Volume) (*v1.PersistentVolume, error) {
	name := claimName(pod, podVol)
	claim, err := p.listers.Claims.PersistentVolumeClaims(pod.Namespace).Get(name)
	if err != nil {
		return nil, fmt.Errorf("claim %s/%s: %w", pod.Namespace, name, err)
	}
	if podVol.Ephemeral != nil {
		if err := ephemeral.VolumeIsForPod(pod, claim); err != nil {
			return nil, err
		}
	}
	if claim.Status.Phase != v1.ClaimBound || claim.Spec.VolumeName == "" {
		return nil, fmt.Errorf("claim %s/%s is not bound", pod.Namespace, name)
	}
	pv, err := p.listers.PVs.Get(claim.Spec.VolumeName)
	if err != nil {
		return nil, fmt.Errorf("PersistentVolume %s of claim %s/%s: %w", claim.Spec.VolumeName, pod.Namespace, name, err)
	}
	if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != claim.UID {
		return nil, fmt.Errorf("PersistentVolume %s is not bound to claim %s/%s (claimRef does not name the claim's uid %s)",
			pv.Name, pod.Namespace, name, claim.UID)
	}
	return pv, nil
}

// UnresolvedClaims returns the claims of the pod that the informers cannot
// follow to a PersistentVolume bound to them: the claim is missing, not bound, or
// bound to a PersistentVolume that is missing or names another claim.
func (p *Populator) UnresolvedClaims(pod *v1.Pod) []types.NamespacedName {
	var out []types.NamespacedName
	for i := range pod.Spec.Volumes {
		podVol := &pod.Spec.Volumes[i]
		name := claimName(pod, podVol)
		if name == "" {
			continue
		}
		if _, err := p.claimedPV(pod, podVol); err != nil {
			out = append(out, types.NamespacedName{Namespace: pod.Namespace, Name: name})
		}
	}
	return out
}

// inTree returns an in-tree iSCSI or Fibre Channel volume. kube-controller-manager
// does not check one inline in a pod for multi-attach; in a PV the access modes
// decide.
func inTree(name volumename.UniqueName, displayName, pvName string, multiAttach bool) cache.Volume {
	return cache.Volume{Name: name, PVName: pvName, DisplayName: displayName, MultiAttach: multiAttach}
}

// fromPV turns a PersistentVolume into an attachable volume: CSI, translatable
// in-tree, iSCSI or Fibre Channel. A translated PV is judged entirely on the
// translation, as kube-controller-manager judges it: its driver, handle and access
// modes, which may differ from the PV's own (a gcePersistentDisk ReadWriteMany, or
// ReadWriteOnce with ReadOnlyMany, becomes ReadWriteOnce).
func (p *Populator) fromPV(logger klog.Logger, pv *v1.PersistentVolume) (cache.Volume, bool, error) {
	switch src := pv.Spec.PersistentVolumeSource; {
	case src.ISCSI != nil:
		name := volumename.ISCSI(src.ISCSI.TargetPortal, src.ISCSI.IQN, src.ISCSI.Lun)
		return inTree(name, pv.Name, pv.Name, volumename.MultiAttachAllowed(pv.Spec.AccessModes)), true, nil
	case src.FC != nil:
		name, err := volumename.FC(src.FC.TargetWWNs, src.FC.Lun, src.FC.WWIDs)
		if err != nil {
			return cache.Volume{}, false, fmt.Errorf("PersistentVolume %s: %w", pv.Name, err)
		}
		return inTree(name, pv.Name, pv.Name, volumename.MultiAttachAllowed(pv.Spec.AccessModes)), true, nil
	}
	csiPV := pv
	if pv.Spec.CSI == nil {
		if !p.translator.IsPVMigratable(pv) {
			return cache.Volume{}, false, nil
		}
		translated, err := p.translator.TranslateInTreePVToCSI(logger, pv)
		if err != nil {
			return cache.Volume{}, false, fmt.Errorf("translating in-tree PersistentVolume %s to CSI: %w", pv.Name, err)
		}
		if translated.Spec.CSI == nil {
			return cache.Volume{}, false, fmt.Errorf("translation of PersistentVolume %s gave no CSI source", pv.Name)
		}
		csiPV = translated
	}
	src := csiPV.Spec.CSI
	return cache.Volume{
		Name:        volumename.CSI(src.Driver, src.VolumeHandle),
		Driver:      src.Driver,
		Handle:      src.VolumeHandle,
		PVName:      pv.Name,
		DisplayName: pv.Name,
		MultiAttach: volumename.MultiAttachAllowed(csiPV.Spec.AccessModes),
		Migrated:    csiPV != pv,
	}, true, nil
}

// DriverNeedsNoAttach says why the volume's CSI driver needs no attaching, or
// returns "" when it does.
func (p *Populator) DriverNeedsNoAttach(vol cache.Volume) string {
	if vol.Driver == "" || p.attachRequired(vol.Driver) {
		return ""
	}
	return fmt.Sprintf("CSIDriver %s says attachRequired: false", vol.Driver)
}

// attachRequired reads the driver's CSIDriver object: attaching is required unless
// it says attachRequired: false; a missing object means required.
func (p *Populator) attachRequired(driver string) bool {
	d, err := p.listers.Drivers.Get(driver)
	if err != nil || d.Spec.AttachRequired == nil {
		return true
	}
	return *d.Spec.AttachRequired
}

// VolumeOfPV identifies the CSI volume of a PersistentVolume, for matching
// VolumeAttachments to volumes.
func (p *Populator) VolumeOfPV(pv *v1.PersistentVolume) (cache.Volume, bool, error) {
	return p.fromPV(klog.Background(), pv)
}

// VolumeOfInlineSpec identifies the CSI volume of a VolumeAttachment's inline spec.
func VolumeOfInlineSpec(spec *v1.PersistentVolumeSpec) (cache.Volume, bool) {
	if spec == nil || spec.CSI == nil {
		return cache.Volume{}, false
	}
	return cache.Volume{
		Name:        volumename.CSI(spec.CSI.Driver, spec.CSI.VolumeHandle),
		Driver:      spec.CSI.Driver,
		Handle:      spec.CSI.VolumeHandle,
		InlineSpec:  spec,
		MultiAttach: volumename.MultiAttachAllowed(spec.AccessModes),
		Migrated:    true,
	}, true
}
