// Package volumename holds the identity of an attachable volume as the rest of the
// cluster sees it: the unique volume name kubelet looks for in node status (for CSI
// volumes and for the in-tree iSCSI and Fibre Channel volumes that are not migrated
// to CSI), the plugin name metrics label it with, the name of the VolumeAttachment
// that records a CSI attachment, and the rule that decides whether a volume may be
// attached to several nodes at once.
package volumename

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Plugin names, as kubelet and kube-controller-manager spell them.
const (
	PluginCSI   = "kubernetes.io/csi"
	PluginISCSI = "kubernetes.io/iscsi"
	PluginFC    = "kubernetes.io/fc"
)

// uniqueNamePrefix is the plugin part of every CSI unique volume name.
const uniqueNamePrefix = PluginCSI + "/"

// UniqueName identifies a volume cluster-wide. It is the string kubelet lists in
// node.status.volumesAttached and node.status.volumesInUse.
type UniqueName string

// CSI returns kubernetes.io/csi/<driver>^<volumeHandle>.
func CSI(driver, volumeHandle string) UniqueName {
	return UniqueName(uniqueNamePrefix + driver + "^" + volumeHandle)
}

// ISCSI returns kubernetes.io/iscsi/<targetPortal>:<iqn>:<lun>.
func ISCSI(targetPortal, iqn string, lun int32) UniqueName {
	return UniqueName(fmt.Sprintf("%s/%s:%s:%d", PluginISCSI, targetPortal, iqn, lun))
}

// FC returns the name of a Fibre Channel volume: kubernetes.io/fc/[wwn1 wwn2]:<lun>
// when the source names target WWNs and a LUN, else kubernetes.io/fc/[wwid1 wwid2]
// when it names WWIDs. A source with neither has no name.
func FC(targetWWNs []string, lun *int32, wwids []string) (UniqueName, error) {
	switch {
	case len(targetWWNs) > 0 && lun != nil:
		return UniqueName(fmt.Sprintf("%s/%v:%d", PluginFC, targetWWNs, *lun)), nil
	case len(wwids) > 0:
		return UniqueName(fmt.Sprintf("%s/%v", PluginFC, wwids)), nil
	}
	return "", fmt.Errorf("fibre channel source has neither target WWNs with a LUN nor WWIDs")
}

// ReportOnly tells whether the volume is one whose attach and detach only add it to
// and remove it from node status, with no VolumeAttachment: the in-tree iSCSI and
// Fibre Channel volumes, which kubelet attaches itself once node status lists them.
func ReportOnly(name UniqueName) bool {
	return strings.HasPrefix(string(name), PluginISCSI+"/") || strings.HasPrefix(string(name), PluginFC+"/")
}

// PluginLabel is the plugin name metrics use for the volume, as kube-controller-manager
// labels it: kubernetes.io/csi:<driver> for a CSI volume, the plugin name otherwise.
func PluginLabel(name UniqueName) string {
	if driver, _, err := ParseUniqueName(name); err == nil {
		return PluginCSI + ":" + driver
	}
	plugin, _, ok := strings.Cut(strings.TrimPrefix(string(name), "kubernetes.io/"), "/")
	if !ok {
		return "N/A"
	}
	return "kubernetes.io/" + plugin
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
