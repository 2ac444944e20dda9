package deploy

import (
	"fmt"
	"time"

	storagev1 "k8s.io/api/storage/v1"

	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

// attachments returns the VolumeAttachments of the volume, by node.
func attachments(w *suite.World, v workload.Volume) map[string]storagev1.VolumeAttachment {
	w.T.Helper()
	byNode := map[string]storagev1.VolumeAttachment{}
	for _, va := range w.Attachments() {
		if pv := va.Spec.Source.PersistentVolumeName; pv != nil && *pv == v.PV {
			byNode[va.Spec.NodeName] = va
		}
	}
	return byNode
}

// attachedOnlyTo tells whether the volume is attached to node and nowhere else, as
// VolumeAttachments and the node's status say.
func attachedOnlyTo(w *suite.World, v workload.Volume, node string) bool {
	w.T.Helper()
	vas := attachments(w, v)
	va, ok := vas[node]
	return len(vas) == 1 && ok && va.Status.Attached && va.DeletionTimestamp == nil && w.InNodeStatus(node, v)
}

// waitAttachedOnlyTo waits until the volume is attached to node and nowhere else.
func waitAttachedOnlyTo(w *suite.World, v workload.Volume, node string, timeout time.Duration) {
	w.T.Helper()
	suite.Eventually(w.T, timeout, fmt.Sprintf("%s attached to %s only", v.PV, node), func() bool { return attachedOnlyTo(w, v, node) })
}

// waitDetachedEverywhere waits until the volume has no VolumeAttachment left.
func waitDetachedEverywhere(w *suite.World, v workload.Volume, timeout time.Duration) {
	w.T.Helper()
	suite.Eventually(w.T, timeout, fmt.Sprintf("%s detached everywhere", v.PV), func() bool { return len(attachments(w, v)) == 0 })
}
