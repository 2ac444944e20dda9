// Package invariant watches an API server for the whole length of a test and records
// every moment it broke the safety rules of internal/safetyrules that an API watch
// can judge: rule 1 (single-attach), and rule 2 (mounted-detach) for VolumeAttachments.
// It sees no pods and no mounts: it counts a volume mounted while its node has listed
// it in status.volumesInUse continuously since a moment status.volumesAttached listed
// it too (kubelet mounts only then), and lets a node that is not Ready lose any volume.
// A migrated in-tree volume is judged by its CSI translation.
//
// It orders events of VolumeAttachments, Nodes and PersistentVolumes by resourceVersion
// (etcd's revision), so each rule is judged against the state of the other objects at
// the exact revision of the change.
package invariant
