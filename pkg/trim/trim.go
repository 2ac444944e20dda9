// Package trim drops, before an object enters an informer's cache, what the
// controller never reads (see Object): it is the transform of the controller's
// informer factory.
package trim

import (
	"slices"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// Object drops, before an object enters the informer's cache, what the
// controller never reads: managedFields everywhere, the large parts of pods and
// nodes (container specs, conditions, a node's labels, system info and list of
// images), which dominate the memory of a large cluster's informers, and all but
// the volume's identity, access modes and binding of PVs, claims and
// VolumeAttachments, which a cluster has by the ten thousand.
func Object(obj any) (any, error) {
	if accessor, err := meta.Accessor(obj); err == nil {
		accessor.SetManagedFields(nil)
	}
	switch o := obj.(type) {
	case *v1.Pod:
		trimPod(o)
	case *v1.Node:
		trimNode(o)
	case *v1.PersistentVolume:
		trimPV(o)
	case *v1.PersistentVolumeClaim:
		trimClaim(o)
	case *storagev1.VolumeAttachment:
		trimVolumeAttachment(o)
	}
	return obj, nil
}

// trimPod keeps what deciding which volumes a pod needs takes: its identity and
// deletion, node, the volumes that may need attaching, phase and whether each
// container runs.
func trimPod(pod *v1.Pod) {
	pod.Annotations, pod.Labels, pod.OwnerReferences = nil, nil, nil
	pod.Spec = v1.PodSpec{NodeName: pod.Spec.NodeName, Volumes: slices.DeleteFunc(pod.Spec.Volumes, neverAttached)}
	pod.Status = v1.PodStatus{
		Phase:                      pod.Status.Phase,
		InitContainerStatuses:      containerStates(pod.Status.InitContainerStatuses),
		ContainerStatuses:          containerStates(pod.Status.ContainerStatuses),
		EphemeralContainerStatuses: containerStates(pod.Status.EphemeralContainerStatuses),
	}
}

// neverAttached tells whether a pod volume is of a kind no attach/detach
// controller handles: the service account token, configuration, scratch space and
// host directories that most pods carry.
func neverAttached(v v1.Volume) bool {
	s := v.VolumeSource
	return s.Projected != nil || s.ConfigMap != nil || s.Secret != nil || s.DownwardAPI != nil ||
		s.EmptyDir != nil || s.HostPath != nil || s.Image != nil
}

func containerStates(statuses []v1.ContainerStatus) []v1.ContainerStatus {
	if len(statuses) == 0 {
		return nil
	}
	out := make([]v1.ContainerStatus, len(statuses))
	for i, s := range statuses {
		out[i] = v1.ContainerStatus{Name: s.Name, State: s.State}
	}
	return out
}

// trimNode keeps what the node register, node status writes and the force-detach
// rules read: the controller-managed annotation, the taints, whether the node is
// Ready, and the volumes attached and in use. Labels, the other annotations and
// conditions, addresses, capacity, system info and images go.
func trimNode(node *v1.Node) {
	managed, isSet := node.Annotations[cache.ManagedAnnotation]
	node.Annotations, node.Labels = nil, nil
	if isSet {
		node.Annotations = map[string]string{cache.ManagedAnnotation: managed}
	}
	node.Spec = v1.NodeSpec{Taints: node.Spec.Taints}
	var conditions []v1.NodeCondition
	if i := slices.IndexFunc(node.Status.Conditions, func(c v1.NodeCondition) bool { return c.Type == v1.NodeReady }); i >= 0 {
		conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: node.Status.Conditions[i].Status}}
	}
	node.Status = v1.NodeStatus{
		Conditions:      conditions,
		VolumesAttached: node.Status.VolumesAttached,
		VolumesInUse:    node.Status.VolumesInUse,
	}
}

// trimPV keeps what identifying a PV's volume takes: its source (of a CSI source,
// the driver and the handle), its access modes (multi-attach) and the claim it is
// bound to. An in-tree source other than iSCSI and Fibre Channel keeps the whole
// spec, labels and annotations: csi-translation-lib reads zones from labels and
// node affinity, a resource group from annotations, the claim's namespace.
func trimPV(pv *v1.PersistentVolume) {
	pv.Status = v1.PersistentVolumeStatus{}
	src := pv.Spec.PersistentVolumeSource
	switch {
	case src.ISCSI != nil, src.FC != nil:
	case src.CSI != nil:
		src = v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: src.CSI.Driver, VolumeHandle: src.CSI.VolumeHandle}}
	default:
		return
	}
	spec := v1.PersistentVolumeSpec{PersistentVolumeSource: src, AccessModes: pv.Spec.AccessModes}
	if ref := pv.Spec.ClaimRef; ref != nil {
		spec.ClaimRef = &v1.ObjectReference{Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID}
	}
	pv.Spec = spec
	pv.Annotations, pv.Labels = nil, nil
}

// trimClaim keeps what following a claim to its PV takes: the bound volume's name
// and the phase, and the owner references that tie a generic ephemeral volume's
// claim to its pod.
func trimClaim(claim *v1.PersistentVolumeClaim) {
	claim.Annotations, claim.Labels = nil, nil
	claim.Spec = v1.PersistentVolumeClaimSpec{VolumeName: claim.Spec.VolumeName}
	claim.Status = v1.PersistentVolumeClaimStatus{Phase: claim.Status.Phase}
}

// trimVolumeAttachment keeps the spec (node, attacher, PV name or inline spec),
// finalizers and deletion, whether the volume is attached and the errors; it drops
// the attachment metadata, which is for kubelet.
func trimVolumeAttachment(va *storagev1.VolumeAttachment) {
	va.Annotations, va.Labels = nil, nil
	va.Status.AttachmentMetadata = nil
}
