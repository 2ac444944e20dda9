// Package cache keeps the controller's picture of the world in one place: the
// desired state (which volume must be attached to which node, for which pods), the
// actual state (which VolumeAttachments exist and what they say), and what the
// controller knows of each node (managed, Ready, out of service, volumes in use).
// Everything is indexed by volume and by node, and safe for concurrent use.
package cache

import (
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// Volume is everything needed to attach a volume: what its VolumeAttachment says
// and how people and the multi-attach rule know it.
type Volume struct {
	Name   volumename.UniqueName
	Driver string
	Handle string
	// PVName is set for a volume that comes from a PersistentVolume.
	PVName string
	// InlineSpec is set for an in-tree inline volume translated to CSI: the
	// VolumeAttachment carries it as source.inlineVolumeSpec.
	InlineSpec *v1.PersistentVolumeSpec
	// DisplayName is how events name the volume: the PV name, the pod's volume name
	// for an inline iSCSI or FC volume, or the translated PV's name for an inline
	// volume migrated to CSI.
	DisplayName string
	// MultiAttach tells whether the volume may be attached to several nodes at once.
	MultiAttach bool
	// Migrated is set for an in-tree volume, inline or in a PV, that was
	// translated to CSI.
	Migrated bool
}

// AttachmentOn names the object that attaches the volume to the node: the
// VolumeAttachment the controller creates, named for the volume's handle, driver
// and node, which kubelet waits for; "" for an in-tree iSCSI or Fibre Channel
// volume, which node status alone attaches. A VolumeAttachment of another name
// (another tool's copy) holds the volume there, but no pod can start on it.
func (v Volume) AttachmentOn(node string) string {
	if volumename.ReportOnly(v.Name) {
		return ""
	}
	return volumename.AttachmentName(v.Handle, v.Driver, node)
}

// PodRef names a pod that needs a volume; events about the volume go on it.
type PodRef struct {
	Namespace string
	Name      string
	UID       types.UID
}

// Key is the pod's namespace/name.
func (p PodRef) Key() string { return p.Namespace + "/" + p.Name }

func sortedVolumeNames(set map[volumename.UniqueName]struct{}) []volumename.UniqueName {
	return slices.Sorted(maps.Keys(set))
}

func addToIndex[K comparable, V comparable](index map[K]map[V]struct{}, key K, value V) {
	set, ok := index[key]
	if !ok {
		set = make(map[V]struct{})
		index[key] = set
	}
	set[value] = struct{}{}
}

func removeFromIndex[K comparable, V comparable](index map[K]map[V]struct{}, key K, value V) {
	set, ok := index[key]
	if !ok {
		return
	}
	delete(set, value)
	if len(set) == 0 {
		delete(index, key)
	}
}
