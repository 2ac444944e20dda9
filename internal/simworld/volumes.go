package simworld

import (
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/attachdetach-controller/attachdetach-controller/internal/fakeapi"
	"github.com/attachdetach-controller/attachdetach-controller/internal/safetyrules"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
)

// OutOfServiceTaint is the taint of a node shut down for good (non-graceful shutdown).
const OutOfServiceTaint = "node.kubernetes.io/out-of-service"

// NodeVolume is a volume (by unique name) on a node.
type NodeVolume struct {
	Node, Volume string
}

// Volume is a volume a pod uses that needs attaching: a CSI, iSCSI or Fibre
// Channel volume through a bound claim, or an iSCSI volume inline in the pod.
type Volume struct {
	// PV is empty for an inline volume.
	PV string
	// Name is the unique name node status and kubelet know it by.
	Name string
	// Driver and Handle are a CSI volume's; both empty for an in-tree volume.
	Driver, Handle string
	// SingleAttach: its access modes are listed and allow no second node. An
	// inline volume is never single-attach: nothing checks it.
	SingleAttach bool
}

// ReportOnly tells whether the volume is an in-tree iSCSI or Fibre Channel
// volume: attached by node status listing it, with no VolumeAttachment.
func (v Volume) ReportOnly() bool { return v.Driver == "" }

// ReportOnlyName tells whether a unique volume name is an in-tree iSCSI or Fibre
// Channel volume's.
func ReportOnlyName(name string) bool {
	return strings.HasPrefix(name, "kubernetes.io/iscsi/") || strings.HasPrefix(name, "kubernetes.io/fc/")
}

// Counts tells whether a pod needs its volumes: it is on a node and not
// terminated (Succeeded, Failed, or deleted with no container running).
func Counts(pod *corev1.Pod) bool {
	if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	return pod.DeletionTimestamp == nil || running(pod)
}

func running(pod *corev1.Pod) bool {
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, s := range list {
			if s.State.Running != nil {
				return true
			}
		}
	}
	return false
}

// PodVolumes returns the volumes of a pod's bound claims whose PV exists, and
// its inline iSCSI volumes.
func PodVolumes(r fakeapi.Reader, pod *corev1.Pod) []Volume {
	var out []Volume
	for _, v := range pod.Spec.Volumes {
		if v.ISCSI != nil {
			out = append(out, Volume{Name: sim.ISCSIVolumeName(v.ISCSI.TargetPortal, v.ISCSI.IQN, v.ISCSI.Lun)})
			continue
		}
		if v.PersistentVolumeClaim == nil {
			continue
		}
		claim, ok := fakeapi.Get[*corev1.PersistentVolumeClaim](r, pod.Namespace, v.PersistentVolumeClaim.ClaimName)
		if !ok || claim.Status.Phase != corev1.ClaimBound || claim.Spec.VolumeName == "" {
			continue
		}
		if vol, ok := PVVolume(r, claim.Spec.VolumeName); ok {
			out = append(out, vol)
		}
	}
	return out
}

// PVVolume returns the volume of a PV, if the PV exists and is a CSI, iSCSI or
// Fibre Channel volume.
func PVVolume(r fakeapi.Reader, name string) (Volume, bool) {
	pv, ok := fakeapi.Get[*corev1.PersistentVolume](r, "", name)
	if !ok {
		return Volume{}, false
	}
	v := Volume{PV: name, SingleAttach: safetyrules.SingleAttach(pv.Spec.AccessModes)}
	switch src := pv.Spec.PersistentVolumeSource; {
	case src.CSI != nil:
		v.Driver, v.Handle, v.Name = src.CSI.Driver, src.CSI.VolumeHandle, sim.UniqueVolumeName(src.CSI.Driver, src.CSI.VolumeHandle)
	case src.ISCSI != nil:
		v.Name = sim.ISCSIVolumeName(src.ISCSI.TargetPortal, src.ISCSI.IQN, src.ISCSI.Lun)
	case src.FC != nil:
		v.Name = sim.FCVolumeName(src.FC)
	}
	return v, v.Name != ""
}

// attachRequired tells whether a driver's volumes need attaching.
func attachRequired(r fakeapi.Reader, driver string) bool {
	d, ok := fakeapi.Get[*storagev1.CSIDriver](r, "", driver)
	return !ok || d.Spec.AttachRequired == nil || *d.Spec.AttachRequired
}

// Wanted returns the volumes that pods which count need attached, by node: what a
// correct controller attaches, whether or not the node exists.
func Wanted(r fakeapi.Reader) map[NodeVolume]Volume {
	out := map[NodeVolume]Volume{}
	for _, pod := range fakeapi.List[*corev1.Pod](r) {
		if !Counts(pod) {
			continue
		}
		for _, v := range PodVolumes(r, pod) {
			if v.ReportOnly() || attachRequired(r, v.Driver) {
				out[NodeVolume{pod.Spec.NodeName, v.Name}] = v
			}
		}
	}
	return out
}

// OutOfService tells whether a node has the out-of-service taint.
func OutOfService(node *corev1.Node) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == OutOfServiceTaint })
}

// Mounts is what the simulated kubelets have mounted. Safe for concurrent use.
type Mounts struct {
	mu sync.Mutex
	m  map[NodeVolume]bool
}

// NewMounts returns an empty mount table.
func NewMounts() *Mounts { return &Mounts{m: map[NodeVolume]bool{}} }

// Mounted tells whether the volume is mounted on the node.
func (m *Mounts) Mounted(node, volume string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.m[NodeVolume{node, volume}]
}

// Set records that the volume is mounted on the node, or no longer is.
func (m *Mounts) Set(node, volume string, mounted bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mounted {
		m.m[NodeVolume{node, volume}] = true
	} else {
		delete(m.m, NodeVolume{node, volume})
	}
}

// onNode returns the volumes mounted on a node.
func (m *Mounts) onNode(node string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for nv := range m.m {
		if nv.Node == node {
			out = append(out, nv.Volume)
		}
	}
	slices.Sort(out)
	return out
}

// ShutdownTaint is the taint the cloud provider puts on a node whose instance is
// shut down.
const ShutdownTaint = "node.cloudprovider.kubernetes.io/shutdown"

// ShutdownTainted tells whether a node has the cloud provider's shutdown taint.
func ShutdownTainted(node *corev1.Node) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == ShutdownTaint })
}
