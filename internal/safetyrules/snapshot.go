package safetyrules

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// NodeVolume is a volume, by unique name, on a node.
type NodeVolume struct {
	Node, Volume string
}

// Settings are the controller's settings force detaches are judged by.
type Settings struct {
	// MaxWait is the wait for unmount before a force detach from a node not
	// Ready; Grace how long a force condition still counts once it ended. A
	// checker that sees no pods leaves both zero: any node not Ready may lose its
	// volumes.
	MaxWait, Grace time.Duration
	// NeverForce tells whether a volume is never force-detached on the timeout;
	// nil: none is.
	NeverForce func(volume string) bool
	// DetachOnShutdownTaint lets a node not Ready with the cloud provider's
	// shutdown taint lose its volumes at once.
	DetachOnShutdownTaint bool
}

// NodeHealth is a node's force-detach conditions, and when they last ended.
type NodeHealth struct {
	// Deleted: the Node object is gone. Unhealthy: not Ready, or deleted.
	Deleted, Unhealthy bool
	// OutOfService: it has the out-of-service taint, or was deleted with it.
	OutOfService bool
	// Shutdown: not Ready with the cloud provider's shutdown taint (or deleted so).
	Shutdown bool
	// HealthyAt is when it last became Ready again, UnhealthyAt when it last
	// stopped being Ready or was deleted, TaintRemovedAt when it last lost the
	// out-of-service taint, ShutdownEndedAt when Shutdown last ended (zero:
	// never).
	HealthyAt, UnhealthyAt, TaintRemovedAt, ShutdownEndedAt time.Time
	// Deletions are the times its Node object was deleted, oldest first.
	Deletions []time.Time
}

// Snapshot is what a checker knows at one instant. The rules only read it.
type Snapshot struct {
	Now time.Time
	// ControllerReady is when the running controller became ready.
	ControllerReady time.Time
	Settings        Settings
	// Nodes are every node seen, by name.
	Nodes map[string]*NodeHealth
	// Needed are the volumes pods that count need on each node; UnneededSince
	// when a volume last stopped being needed there (absent: never needed), and
	// NeededSince when it last began to be.
	Needed                     map[NodeVolume]bool
	UnneededSince, NeededSince map[NodeVolume]time.Time
	// Mounted tells whether kubelet on a node has a volume mounted.
	Mounted func(node, volume string) bool
	// MayMount holds the volumes each node's kubelet may mount by what its status
	// said: listed in volumesInUse continuously since a version that listed them
	// in volumesAttached too.
	MayMount map[NodeVolume]bool
	// LastListed is when a write of a node last left a volume listed in its
	// volumesAttached, LastRemoved when a write of the node took it out.
	LastListed, LastRemoved map[NodeVolume]time.Time
	// ForceReleased is when a listing of a volume on another node began while
	// rule 2's force conditions held on a node whose kubelet may have had it
	// mounted: from then on that mount is the forced detach's accepted risk.
	ForceReleased map[NodeVolume]time.Time
}

// SingleAttach tells whether access modes allow attaching to one node only.
// Volumes without access modes are not checked.
func SingleAttach(modes []corev1.PersistentVolumeAccessMode) bool {
	return len(modes) > 0 && !slices.Contains(modes, corev1.ReadWriteMany) && !slices.Contains(modes, corev1.ReadOnlyMany)
}

// ForceDetachAllowed tells whether rule 2 lets the volume be detached from the
// node while mounted.
func (s *Snapshot) ForceDetachAllowed(node, volume string) bool {
	h, ok := s.Nodes[node]
	if !ok {
		return false
	}
	grace := s.Settings.Grace
	if h.OutOfService || (!h.TaintRemovedAt.IsZero() && s.Now.Sub(h.TaintRemovedAt) <= grace) {
		return true
	}
	if s.Settings.DetachOnShutdownTaint && (h.Shutdown || (!h.ShutdownEndedAt.IsZero() && s.Now.Sub(h.ShutdownEndedAt) <= grace)) {
		return true
	}
	nv := NodeVolume{Node: node, Volume: volume}
	if s.Settings.NeverForce != nil && s.Settings.NeverForce(volume) {
		return false
	}
	// at is the last instant no pod needed the volume there, if within the
	// grace: a detach sent before a pod came may be applied after.
	at := s.Now
	if s.Needed[nv] {
		since, ok := s.NeededSince[nv]
		if !ok || s.Now.Sub(since) > grace {
			return false
		}
		at = since
	}
	// last is the last instant, no later than at, the node was unhealthy, if
	// within the grace.
	var last time.Time
	switch {
	case h.Unhealthy && !h.UnhealthyAt.After(at):
		last = at
	case !h.HealthyAt.IsZero() && s.Now.Sub(h.HealthyAt) <= grace:
		last = h.HealthyAt
		if at.Before(last) {
			last = at
		}
	default:
		return false
	}
	return last.Sub(s.UnneededSince[nv]) >= s.Settings.MaxWait-grace
}

// mayHaveMounted tells whether kubelet on the node has the volume mounted, or
// may mount it by what the node's status has said.
func (s *Snapshot) mayHaveMounted(node, volume string) bool {
	return s.Mounted(node, volume) || s.MayMount[NodeVolume{Node: node, Volume: volume}]
}

// released tells whether the last change to the node's listing of the volume
// was a write of the node that took it out, or a listing elsewhere that the
// force conditions on the node allowed.
func (s *Snapshot) released(node, volume string) bool {
	nv := NodeVolume{Node: node, Volume: volume}
	removed, ok := s.LastRemoved[nv]
	forced, forcedOK := s.ForceReleased[nv]
	return ok && !removed.Before(s.LastListed[nv]) || forcedOK && !forced.Before(s.LastListed[nv])
}

// recordLost tells whether the only record of a node-status attachment of the
// volume to the node, the node's status, went with its Node object before the
// running controller was ready, and the volume has not been listed there since.
// Any such deletion counts, not only the last: a node created again and deleted
// again, the volume never listed on it in between, gave no controller the
// record back.
func (s *Snapshot) recordLost(node, volume string) bool {
	h, ok := s.Nodes[node]
	if !ok {
		return false
	}
	listed := s.LastListed[NodeVolume{Node: node, Volume: volume}]
	for _, deleted := range h.Deletions {
		if s.ControllerReady.After(deleted) && !listed.After(deleted) {
			return true
		}
	}
	return false
}

// describe words a node's state and the volume's need there for a violation.
func (s *Snapshot) describe(node, volume string) string {
	h, ok := s.Nodes[node]
	state := "unknown"
	switch {
	case ok && h.Deleted:
		state = "deleted"
	case ok:
		state = fmt.Sprintf("Ready=%v out-of-service=%v", !h.Unhealthy, h.OutOfService)
	}
	nv := NodeVolume{Node: node, Volume: volume}
	if s.Needed[nv] {
		return state + ", volume still needed by a pod there"
	}
	if since, ok := s.UnneededSince[nv]; ok {
		return state + fmt.Sprintf(", volume unneeded there for %s", s.Now.Sub(since))
	}
	return state
}
