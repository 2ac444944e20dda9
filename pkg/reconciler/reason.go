package reconciler

import (
	"fmt"
	"strings"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// ReasonCode names the rule behind a decision.
type ReasonCode int

// The rules, as decide applies them.
const (
	// ReasonToAttach: a pod on the node needs the volume, and nothing of it is
	// there yet.
	ReasonToAttach ReasonCode = iota
	// ReasonAttached: the controller's VolumeAttachment on the node is attached.
	ReasonAttached
	// ReasonAttaching: the VolumeAttachment exists and the external-attacher has
	// not attached it yet.
	ReasonAttaching
	// ReasonAttachFailing: as ReasonAttaching, with the driver's error
	// (DriverError).
	ReasonAttachFailing
	// ReasonPreviousDetaching: the controller's VolumeAttachment on the node is
	// being deleted, and must be gone before the volume is attached again.
	ReasonPreviousDetaching
	// ReasonNodeMissing: the node has no object.
	ReasonNodeMissing
	// ReasonKubeletAttaches: the node is not managed by the controller.
	ReasonKubeletAttaches
	// ReasonHoldersUnknown: the actual state may lack a VolumeAttachment that
	// holds the single-attach volume elsewhere (Unproven).
	ReasonHoldersUnknown
	// ReasonHeld: other nodes hold the single-attach volume (HeldBy).
	ReasonHeld
	// ReasonKubeletDetaches: no pod on the node needs the volume, and the node is
	// not managed by the controller.
	ReasonKubeletDetaches
	// ReasonDetaching: the VolumeAttachment is being deleted (DriverError, if the
	// driver failed to detach).
	ReasonDetaching
	// ReasonNotInUse: no pod on the node needs the volume and kubelet does not
	// report it in use.
	ReasonNotInUse
	// ReasonOutOfService: the node has the out-of-service taint.
	ReasonOutOfService
	// ReasonShutdown: the node has the shutdown taint and is not Ready.
	ReasonShutdown
	// ReasonMountedNeverForced: the volume is in use and its policy never
	// force-detaches.
	ReasonMountedNeverForced
	// ReasonMountedSinceUnknown: the volume is in use, and when the wait for
	// unmount began is not known.
	ReasonMountedSinceUnknown
	// ReasonMounted: the volume is in use and the wait for unmount is not over.
	ReasonMounted
	// ReasonMountedOnReadyNode: the wait is over, but the node is Ready.
	ReasonMountedOnReadyNode
	// ReasonMountedTimedOut: the wait is over and the node is not Ready.
	ReasonMountedTimedOut
	// ReasonPodsNotWatched: the volume is in use, and the pod informer's watch
	// failed and it has not watched again: the wait for unmount is not over
	// before it does.
	ReasonPodsNotWatched
)

// Reason words the decision for an operator: explain, the logs and the shadow
// comparisons all read it.
func (d Decision) Reason() string {
	switch d.Code {
	case ReasonToAttach:
		return "to be attached"
	case ReasonAttached:
		return "attached"
	case ReasonAttaching:
		return "attaching: waiting for the CSI external-attacher"
	case ReasonAttachFailing:
		return "attaching; the CSI driver reported: " + d.DriverError
	case ReasonPreviousDetaching:
		return "its previous VolumeAttachment on this node is being deleted: waiting for the CSI external-attacher to detach it first"
	case ReasonNodeMissing:
		return fmt.Sprintf("node %s does not exist", d.Node)
	case ReasonKubeletAttaches:
		return fmt.Sprintf("node %s is not managed by the attach/detach controller (no %s=true annotation): kubelet attaches there itself", d.Node, cache.ManagedAnnotation)
	case ReasonHoldersUnknown:
		return d.Unproven
	case ReasonHeld:
		return d.heldReason()
	case ReasonKubeletDetaches:
		return fmt.Sprintf("node %s is not managed by the attach/detach controller (no %s=true annotation): kubelet attaches and detaches there itself", d.Node, cache.ManagedAnnotation)
	case ReasonDetaching:
		why := "its VolumeAttachment is being deleted: waiting for the CSI external-attacher to detach it"
		if d.DriverError != "" {
			why += "; the CSI driver reported: " + d.DriverError
		}
		return why
	case ReasonNotInUse:
		return fmt.Sprintf("no pod on %s needs it and kubelet does not report it in use", d.Node)
	case ReasonOutOfService:
		return fmt.Sprintf("node %s has the %s taint: detached although it may still be mounted", d.Node, cache.OutOfServiceTaint)
	case ReasonShutdown:
		return fmt.Sprintf("node %s has the %s taint and is not Ready: detached although it may still be mounted", d.Node, cache.ShutdownTaint)
	case ReasonMountedNeverForced:
		return d.mounted() + "; force detach on timeout is off" + d.policyOf()
	case ReasonMountedSinceUnknown:
		return fmt.Sprintf("%s; %s is %s; force detach %s after the wait began if it is not Ready then%s (when the wait began is known only to the leader: --from-leader)",
			d.mounted(), d.Node, d.readiness(), d.Policy, d.policyOf())
	case ReasonMounted:
		return fmt.Sprintf("%s; %s is %s; force detach at %s if it is not Ready then, in %s%s", d.mounted(), d.Node, d.readiness(),
			d.ForceAt.Format(time.TimeOnly), d.ForceAt.Sub(d.At).Round(time.Second), d.policyOf())
	case ReasonMountedOnReadyNode:
		return fmt.Sprintf("%s; the %s wait%s is over but %s is Ready, so it is not force-detached", d.mounted(), d.Policy, d.policyOf(), d.Node)
	case ReasonMountedTimedOut:
		return fmt.Sprintf("%s; the %s wait%s is over and %s is NotReady: force-detached", d.mounted(), d.Policy, d.policyOf(), d.Node)
	case ReasonPodsNotWatched:
		return d.mounted() + "; the pod informer's watch failed and it has not watched again: pods it does not show may need the volume, so the wait for unmount is not over before it does, and counts from its next list if it lists again"
	}
	return fmt.Sprintf("reason %d", d.Code)
}

// heldReason words the wait of a single-attach volume that other nodes hold.
func (d Decision) heldReason() string {
	var parts []string
	for _, h := range d.HeldBy {
		pods := d.HolderPods[h]
		if len(pods) == 0 {
			parts = append(parts, fmt.Sprintf("held by %s, where no pod needs it any more: waits for its detach", h))
			continue
		}
		parts = append(parts, fmt.Sprintf("held by %s for pod(s) %s: waits for them to go", h, strings.Join(pods, ", ")))
	}
	return "a single-attach volume: " + strings.Join(parts, "; ")
}

// mounted words the wait for kubelet to unmount the volume.
func (d Decision) mounted() string {
	if d.WaitStarted.IsZero() {
		return fmt.Sprintf("mounted on %s (volumesInUse); waiting for kubelet to unmount it", d.Node)
	}
	return fmt.Sprintf("mounted on %s (volumesInUse); waiting for kubelet to unmount it since %s", d.Node, d.WaitStarted.Format(time.TimeOnly))
}

func (d Decision) readiness() string {
	if d.NodeReady {
		return "Ready"
	}
	return "NotReady"
}

func (d Decision) policyOf() string {
	if d.PolicyDriver == "" {
		return ""
	}
	return " (policy of " + d.PolicyDriver + ")"
}
