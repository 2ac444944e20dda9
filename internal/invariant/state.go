package invariant

import (
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
)

// outOfServiceTaint marks a node shut down for good: its volumes may be detached at once.
const outOfServiceTaint = "node.kubernetes.io/out-of-service"

// attachment is what the checker keeps of a VolumeAttachment.
type attachment struct {
	node     string
	volume   volumeRef
	deleting bool
}

// volumeRef identifies the volume of a VolumeAttachment: a PersistentVolume by name,
// or an inline volume spec.
type volumeRef struct {
	pv string
	// inline is set for inline volumes, with everything the checks need.
	inline *sim.Volume
}

// key is unique per volume among VolumeAttachments.
func (r volumeRef) key() string {
	if r.inline != nil {
		return "inline " + r.inline.Name
	}
	return "pv " + r.pv
}

func attachmentOf(va *storagev1.VolumeAttachment) attachment {
	a := attachment{node: va.Spec.NodeName, deleting: va.DeletionTimestamp != nil}
	switch src := va.Spec.Source; {
	case src.PersistentVolumeName != nil:
		a.volume.pv = *src.PersistentVolumeName
	case src.InlineVolumeSpec != nil:
		v := csiVolume(&corev1.PersistentVolume{Spec: *src.InlineVolumeSpec})
		a.volume.inline = &v
	}
	return a
}

// csiVolume judges a PersistentVolume, or an inline volume's spec, as the
// controller must (sim.PVVolume); the zero Volume if it is not a CSI volume.
func csiVolume(pv *corev1.PersistentVolume) sim.Volume {
	if v, ok := sim.PVVolume(pv); ok && !v.ReportOnly() {
		return v
	}
	return sim.Volume{}
}

// nodeVersion is a node's state from one resourceVersion on.
type nodeVersion struct {
	rv           uint64
	exists       bool
	ready        bool
	outOfService bool
	inUse        map[string]bool
	// attached is what status.volumesAttached listed.
	attached map[string]bool
}

func nodeVersionOf(rv uint64, node *corev1.Node, exists bool) nodeVersion {
	v := nodeVersion{rv: rv, exists: exists, inUse: map[string]bool{}, attached: map[string]bool{}}
	if !exists {
		return v
	}
	v.ready = sim.Ready(node)
	for _, taint := range node.Spec.Taints {
		v.outOfService = v.outOfService || taint.Key == outOfServiceTaint
	}
	for _, vol := range node.Status.VolumesInUse {
		v.inUse[string(vol)] = true
	}
	for _, av := range node.Status.VolumesAttached {
		v.attached[string(av.Name)] = true
	}
	return v
}

// mayHaveMounted tells whether kubelet may have the volume mounted at rv: it
// lists the volume in volumesInUse, and has done so continuously since a version in
// which volumesAttached listed it too. kubelet mounts only a volume that both lists
// show, so a volume it started reporting in use after the controller had taken it
// out of volumesAttached cannot be mounted.
func (h *history[V]) mayHaveMounted(rv uint64, inUse, attached func(V) bool) bool {
	i := sort.Search(len(h.versions), func(i int) bool { return h.rvOf(h.versions[i]) > rv }) - 1
	for ; i >= 0 && inUse(h.versions[i]); i-- {
		if attached(h.versions[i]) {
			return true
		}
	}
	return false
}

// pvVersion is a PersistentVolume's state from one resourceVersion on.
type pvVersion struct {
	rv     uint64
	exists bool
	volume sim.Volume
}

// history is the successive versions of one object, oldest first.
type history[V any] struct {
	versions []V
	rvOf     func(V) uint64
}

// at returns the version in force at resourceVersion rv.
func (h *history[V]) at(rv uint64) (V, bool) {
	i := sort.Search(len(h.versions), func(i int) bool { return h.rvOf(h.versions[i]) > rv })
	if i == 0 {
		var zero V
		return zero, false
	}
	return h.versions[i-1], true
}

// lastExisting returns the newest version at or before rv for which exists is true.
func (h *history[V]) lastExisting(rv uint64, exists func(V) bool) (V, bool) {
	for i := len(h.versions) - 1; i >= 0; i-- {
		if v := h.versions[i]; h.rvOf(v) <= rv && exists(v) {
			return v, true
		}
	}
	var zero V
	return zero, false
}

func (h *history[V]) add(v V) {
	h.versions = append(h.versions, v)
}

// prune forgets versions superseded before rv.
func (h *history[V]) prune(rv uint64) {
	i := sort.Search(len(h.versions), func(i int) bool { return h.rvOf(h.versions[i]) > rv })
	if i > 1 {
		h.versions = slices.Delete(h.versions, 0, i-1)
	}
}
