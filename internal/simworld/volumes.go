package simworld

import (
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/attachdetach-controller/attachdetach-controller/internal/fakeapi"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
)

// OutOfServiceTaint is the taint of a node shut down for good (non-graceful shutdown).
const OutOfServiceTaint = "node.kubernetes.io/out-of-service"

// NodeVolume is a volume (by unique name) on a node.
type NodeVolume struct {
	Node, Volume string
}

// Volume is a CSI volume a pod uses through a bound claim.
type Volume struct {
	PV, Driver, Handle string
	// SingleAttach: its access modes are listed and allow no second node.
	SingleAttach bool
}

// UniqueName returns the volume's unique name.
func (v Volume) UniqueName() string { return sim.UniqueVolumeName(v.Driver, v.Handle) }

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

// PodVolumes returns the CSI volumes of a pod's bound claims whose PV exists.
func PodVolumes(r fakeapi.Reader, pod *corev1.Pod) []Volume {
	var out []Volume
	for _, v := range pod.Spec.Volumes {
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

// PVVolume returns the CSI volume of a PV, if the PV exists and is a CSI volume.
func PVVolume(r fakeapi.Reader, name string) (Volume, bool) {
	pv, ok := fakeapi.Get[*corev1.PersistentVolume](r, "", name)
	if !ok || pv.Spec.CSI == nil {
		return Volume{}, false
	}
	modes := pv.Spec.AccessModes
	single := len(modes) > 0 && !slices.Contains(modes, corev1.ReadWriteMany) && !slices.Contains(modes, corev1.ReadOnlyMany)
	return Volume{PV: name, Driver: pv.Spec.CSI.Driver, Handle: pv.Spec.CSI.VolumeHandle, SingleAttach: single}, true
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
			if attachRequired(r, v.Driver) {
				out[NodeVolume{pod.Spec.NodeName, v.UniqueName()}] = v
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

func (m *Mounts) set(node, volume string, mounted bool) {
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
