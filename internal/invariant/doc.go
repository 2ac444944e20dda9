// Package invariant watches an API server for the whole length of a test and records
// every moment the attach/detach safety rules were broken:
//
//   - a single-attach volume (a PersistentVolume whose access modes are listed and
//     include neither ReadWriteMany nor ReadOnlyMany) had VolumeAttachments, in any
//     state, on two nodes at the same time;
//   - a VolumeAttachment's deletion was requested (deletionTimestamp set, or the object
//     removed) while its node listed the volume in status.volumesInUse, was Ready,
//     had no node.kubernetes.io/out-of-service taint, and may have mounted the volume:
//     it had listed it in use continuously since a moment status.volumesAttached also
//     listed it (kubelet mounts only then; a volume reported in use only after the
//     controller took it out of volumesAttached cannot be mounted).
//
// It orders events of VolumeAttachments, Nodes and PersistentVolumes by resourceVersion
// (etcd's revision), so each rule is judged against the state of the other objects at
// the exact revision of the change.
package invariant
