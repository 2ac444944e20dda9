package cache

import (
	"maps"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

const (
	// ManagedAnnotation marks a node whose volumes this controller attaches;
	// kubelet on it waits for node.status.volumesAttached instead of attaching.
	ManagedAnnotation = "volumes.kubernetes.io/controller-managed-attach-detach"
	// OutOfServiceTaint marks a node shut down without draining: its volumes are
	// detached at once, mounted or not.
	OutOfServiceTaint = v1.TaintNodeOutOfService
	// ShutdownTaint marks a node whose instance the cloud provider reports shut
	// down; kubelet there cannot be running.
	ShutdownTaint = "node.cloudprovider.kubernetes.io/shutdown"
)

// NodePresence says what the controller knows of a node's object.
type NodePresence int

const (
	// NodeUnknown: nothing was ever seen of the node (for instance a
	// VolumeAttachment names a node deleted before the controller started).
	NodeUnknown NodePresence = iota
	// NodePresent: the Node object exists.
	NodePresent
	// NodeDeleted: the Node object was seen and is gone; what it last reported
	// still counts.
	NodeDeleted
)

// Node is what the detach and attach rules need to know of a node.
type Node struct {
	Name         string
	Presence     NodePresence
	Managed      bool
	Ready        bool
	OutOfService bool
	// Shutdown is set while the node carries the cloud provider's shutdown taint.
	// For a deleted node, OutOfService and Shutdown say what its final state
	// carried (Shutdown only if it was not Ready then), and neither is set when
	// that state is not known.
	Shutdown bool
	// InUse holds the volumes kubelet lists in status.volumesInUse; for a deleted
	// node, the last list it reported.
	InUse map[volumename.UniqueName]struct{}
	// InUseUnknown is set for a deleted node whose last report was not seen: the
	// informer learned of the deletion by relisting, and kubelet may have reported
	// more after the copy the controller had.
	InUseUnknown bool
}

// Exists tells whether the Node object exists.
func (n Node) Exists() bool { return n.Presence == NodePresent }

// Mounted tells whether kubelet may still have the volume mounted on the node.
// Nothing known of the node means it may.
func (n Node) Mounted(name volumename.UniqueName) bool {
	if n.Presence == NodeUnknown || n.InUseUnknown {
		return true
	}
	_, ok := n.InUse[name]
	return ok
}

// NodeFromObject reads a Node object.
func NodeFromObject(node *v1.Node) Node {
	n := Node{
		Name:         node.Name,
		Presence:     NodePresent,
		Managed:      IsManaged(node),
		Ready:        IsReady(node),
		OutOfService: IsOutOfService(node),
		Shutdown:     IsShutdown(node),
		InUse:        make(map[volumename.UniqueName]struct{}, len(node.Status.VolumesInUse)),
	}
	for _, name := range node.Status.VolumesInUse {
		n.InUse[volumename.UniqueName(name)] = struct{}{}
	}
	return n
}

// IsManaged tells whether the node's volumes are this controller's business.
func IsManaged(node *v1.Node) bool { return node.Annotations[ManagedAnnotation] == "true" }

// IsReady tells whether the node's Ready condition is True.
func IsReady(node *v1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// IsOutOfService tells whether the node carries the out-of-service taint.
func IsOutOfService(node *v1.Node) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t v1.Taint) bool { return t.Key == OutOfServiceTaint })
}

// IsShutdown tells whether the node carries the cloud provider's shutdown taint.
func IsShutdown(node *v1.Node) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t v1.Taint) bool { return t.Key == ShutdownTaint })
}

// ForceRule names a rule that lets a volume be detached although the node may
// still have it mounted; its value is the reason label metrics give it.
type ForceRule string

const (
	// NotForced: the volume goes only once kubelet no longer reports it in use.
	NotForced ForceRule = ""
	// ForcedOutOfService: the node carries the out-of-service taint.
	ForcedOutOfService ForceRule = "out-of-service"
	// ForcedOnTimeout: the wait for unmount is over and the node is not Ready.
	ForcedOnTimeout ForceRule = "timeout"
	// ForcedOnShutdown: the node carries the cloud provider's shutdown taint and
	// is not Ready (only when the operator opted in).
	ForcedOnShutdown ForceRule = "shutdown"
)

// Holds tells whether the rule holds on the node as the API server returned it:
// an informer that lags can show a taint just removed, or a node just recovered.
func (f ForceRule) Holds(node *v1.Node) bool {
	switch f {
	case ForcedOutOfService:
		return IsOutOfService(node)
	case ForcedOnTimeout:
		return !IsReady(node)
	case ForcedOnShutdown:
		return IsShutdown(node) && !IsReady(node)
	}
	return false
}

// HoldsAfterDeletion tells whether the rule holds on a node the API server no
// longer has, by what the register knows of it (last): a node gone is not Ready,
// but a taint counts only if the node's final state, which only the informer's
// delivery of the deletion tells, carried it. A register that has not seen the
// deletion, or saw it without the final state, may show a taint removed before.
func (f ForceRule) HoldsAfterDeletion(last Node) bool {
	switch f {
	case ForcedOutOfService:
		return last.Presence == NodeDeleted && last.OutOfService
	case ForcedOnTimeout:
		return true
	case ForcedOnShutdown:
		return last.Presence == NodeDeleted && last.Shutdown
	}
	return false
}

// Nodes remembers every node the controller has seen, including deleted ones,
// whose last reported volumes in use still count as mounted.
type Nodes struct {
	mu    sync.RWMutex
	nodes map[string]Node
}

// NewNodes returns an empty node register.
func NewNodes() *Nodes { return &Nodes{nodes: make(map[string]Node)} }

// Set records the current state of a node and returns the previous one.
func (n *Nodes) Set(node Node) Node {
	n.mu.Lock()
	defer n.mu.Unlock()
	old := n.nodes[node.Name]
	n.nodes[node.Name] = node
	return old
}

// MarkDeleted records that the node's object is gone: it no longer counts as
// Ready, and what it last reported as in use still counts as mounted. final is the
// object as it was deleted, or nil when that is not known: then every volume
// counts as mounted, and no taint counts, since the one last seen may have been
// removed before the deletion.
func (n *Nodes) MarkDeleted(name string, final *v1.Node) {
	n.mu.Lock()
	defer n.mu.Unlock()
	node, ok := n.nodes[name]
	switch {
	case final != nil:
		node = NodeFromObject(final)
		node.Shutdown = node.Shutdown && !node.Ready
	case !ok:
		return
	default:
		node.InUseUnknown = true
		node.OutOfService, node.Shutdown = false, false
	}
	node.Presence = NodeDeleted
	node.Ready = false
	n.nodes[name] = node
}

// Forget drops what is remembered of a deleted node once nothing refers to it.
func (n *Nodes) Forget(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if node, ok := n.nodes[name]; ok && node.Presence == NodeDeleted {
		delete(n.nodes, name)
	}
}

// Get returns what is known of the node; its Presence is NodeUnknown when nothing is.
func (n *Nodes) Get(name string) Node {
	n.mu.RLock()
	defer n.mu.RUnlock()
	node, ok := n.nodes[name]
	if !ok {
		return Node{Name: name}
	}
	return node
}

// Names returns the name of every node remembered, deleted ones included.
func (n *Nodes) Names() []string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return slices.Sorted(maps.Keys(n.nodes))
}
