// Package csivolume holds the identity of a CSI volume as the rest of the cluster
// sees it: the unique volume name kubelet looks for in node status, the name of the
// VolumeAttachment that records an attachment, and the rule that decides whether a
// volume may be attached to several nodes at once.
package csivolume

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// uniqueNamePrefix is the plugin part of every CSI unique volume name.
const uniqueNamePrefix = "kubernetes.io/csi/"

// UniqueName identifies a volume cluster-wide. It is the string kubelet lists in
// node.status.volumesAttached and node.status.volumesInUse.
type UniqueName string

// NewUniqueName returns kubernetes.io/csi/<driver>^<volumeHandle>.
func NewUniqueName(driver, volumeHandle string) UniqueName {
	return UniqueName(uniqueNamePrefix + driver + "^" + volumeHandle)
}

// IsCSI tells whether a unique volume name is a CSI volume's.
func IsCSI(name UniqueName) bool { return strings.HasPrefix(string(name), uniqueNamePrefix) }

// ParseUniqueName splits a unique name into driver and volume handle. A driver name
// cannot contain '^' while a handle can, so the split is at the first '^'.
func ParseUniqueName(name UniqueName) (driver, volumeHandle string, err error) {
	rest, ok := strings.CutPrefix(string(name), uniqueNamePrefix)
	if !ok {
		return "", "", fmt.Errorf("volume name %q is not a CSI volume name: missing prefix %q", name, uniqueNamePrefix)
	}
	driver, volumeHandle, ok = strings.Cut(rest, "^")
	if !ok || driver == "" || volumeHandle == "" {
		return "", "", fmt.Errorf("volume name %q is not of the form %s<driver>^<volumeHandle>", name, uniqueNamePrefix)
	}
	return driver, volumeHandle, nil
}

// AttachmentName returns the VolumeAttachment name for a volume on a node:
// "csi-" and the hex SHA-256 of volumeHandle, driver and node name run together.
// kube-controller-manager and kubelet use the same name, which is what lets a cluster
// switch controllers without re-attaching anything.
func AttachmentName(volumeHandle, driver, nodeName string) string {
	sum := sha256.Sum256([]byte(volumeHandle + driver + nodeName))
	return "csi-" + hex.EncodeToString(sum[:])
}

// MultiAttachAllowed tells whether a volume with these access modes may be attached
// to more than one node at a time: it may when the modes include ReadWriteMany or
// ReadOnlyMany, or when no mode is listed (nothing to check against).
func MultiAttachAllowed(modes []v1.PersistentVolumeAccessMode) bool {
	if len(modes) == 0 {
		return true
	}
	for _, m := range modes {
		if m == v1.ReadWriteMany || m == v1.ReadOnlyMany {
			return true
		}
	}
	return false
}
