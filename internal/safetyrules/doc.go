// Package safetyrules states the attach/detach safety rules once, as pure
// functions over what a checker knows at one instant (a Snapshot), and words
// their violations. internal/invariant feeds it from an API server's watches,
// internal/simcheck from the simulation's in-memory API and kubelets; it shares
// no code with the controller.
//
//  1. single-attach: a single-attach volume (access modes listed, neither
//     ReadWriteMany nor ReadOnlyMany) never has VolumeAttachments, in any state,
//     on two nodes.
//  2. mounted-detach: a volume is never detached from a node whose kubelet has it
//     mounted (a VolumeAttachment's deletion requested or done; for an in-tree
//     iSCSI or Fibre Channel volume, attached by node status alone, its leaving
//     the node's volumesAttached), unless the node is out of service (the taint,
//     kept by a node deleted with it), or shut down with the cloud provider's
//     taint where the controller honours it, or not Ready (or deleted) with no
//     pod there needing the volume for MaxWait. A condition still counts for
//     Grace after it ended (a pod that came less than Grace ago still lets a
//     detach sent before it through), and the wait may count from up to Grace
//     before the last pod went (a request, or the controller's view of pods,
//     may lag).
//  3. single-attach, by node status: a single-attach iSCSI or Fibre Channel
//     volume is never listed in the volumesAttached of a node while kubelet on
//     another may have it mounted (has it mounted, or lists it in volumesInUse
//     continuously since its node's volumesAttached listed it too), judged when a
//     listing begins and when a kubelet's chance to mount begins. The other node
//     does not count once a write of it took the volume out of its
//     volumesAttached (rule 2 judges that), nor while rule 2's force conditions
//     hold there, nor once a listing elsewhere began while they held (its mount
//     is then the forced detach's accepted risk, also after the node is Ready or
//     needs the volume again), nor once its Node object, the only record of the
//     attachment, was deleted before the running controller was ready, the
//     volume not listed there since.
package safetyrules
