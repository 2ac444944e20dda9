package simworld

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/attachdetach-controller/attachdetach-controller/internal/fakeapi"
	"github.com/attachdetach-controller/attachdetach-controller/internal/safetyrules"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
)

// OutOfServiceTaint is the taint of a node shut down for good (non-graceful shutdown).
const OutOfServiceTaint = "node.kubernetes.io/out-of-service"

// ReportOnlyName tells whether a unique volume name is an in-tree iSCSI or Fibre
// Channel volume's.
func ReportOnlyName(name string) bool {
	return strings.HasPrefix(name, "kubernetes.io/iscsi/") || strings.HasPrefix(name, "kubernetes.io/fc/")
}

// Counts tells whether a pod needs its volumes: it is on a node and not
// terminated (Succeeded, Failed, or deleted with no container running).
func Counts(pod *corev1.Pod) bool {
	return pod.Spec.NodeName != "" && !sim.PodTerminated(pod)
}

// objects finds claims and PersistentVolumes in the store.
func objects(r fakeapi.Reader) sim.Objects {
	return sim.Objects{
		Claim: func(namespace, name string) (*corev1.PersistentVolumeClaim, bool) {
			return fakeapi.Get[*corev1.PersistentVolumeClaim](r, namespace, name)
		},
		PV: func(name string) (*corev1.PersistentVolume, bool) {
			return fakeapi.Get[*corev1.PersistentVolume](r, "", name)
		},
	}
}

// PodVolumes returns the volumes of a pod's bound claims whose PV exists, and
// its inline iSCSI and Fibre Channel volumes.
func PodVolumes(r fakeapi.Reader, pod *corev1.Pod) []sim.Volume {
	vols, _, err := objects(r).PodVolumes(pod)
	if err != nil {
		panic("simworld: " + err.Error())
	}
	return vols
}

// PVVolume returns the volume of a PV, if the PV exists and is a CSI, iSCSI or
// Fibre Channel volume.
func PVVolume(r fakeapi.Reader, name string) (sim.Volume, bool) {
	pv, ok := fakeapi.Get[*corev1.PersistentVolume](r, "", name)
	if !ok {
		return sim.Volume{}, false
	}
	return sim.PVVolume(pv)
}

// attachRequired tells whether a driver's volumes need attaching.
func attachRequired(r fakeapi.Reader, driver string) bool {
	d, ok := fakeapi.Get[*storagev1.CSIDriver](r, "", driver)
	return !ok || d.Spec.AttachRequired == nil || *d.Spec.AttachRequired
}

// Wanted returns the volumes that pods which count need attached, by node: what a
// correct controller attaches, whether or not the node exists.
func Wanted(r fakeapi.Reader) map[safetyrules.NodeVolume]sim.Volume {
	out := map[safetyrules.NodeVolume]sim.Volume{}
	for _, pod := range fakeapi.List[*corev1.Pod](r) {
		if !Counts(pod) {
			continue
		}
		for _, v := range PodVolumes(r, pod) {
			if v.ReportOnly() || attachRequired(r, v.Driver) {
				out[safetyrules.NodeVolume{Node: pod.Spec.NodeName, Volume: v.Name}] = v
			}
		}
	}
	return out
}

// OutOfService tells whether a node has the out-of-service taint.
func OutOfService(node *corev1.Node) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == OutOfServiceTaint })
}

// ShutdownTaint is the taint the cloud provider puts on a node whose instance is
// shut down.
const ShutdownTaint = "node.cloudprovider.kubernetes.io/shutdown"

// ShutdownTainted tells whether a node has the cloud provider's shutdown taint.
func ShutdownTainted(node *corev1.Node) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == ShutdownTaint })
}
