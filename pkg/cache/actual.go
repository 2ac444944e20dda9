package cache

import (
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/csivolume"
)

// Attachment is what the controller knows of one volume on one node. It exists for
// as long as a VolumeAttachment for the pair exists, in whatever state.
type Attachment struct {
	Volume csivolume.UniqueName
	Node   string
	// VolumeAttachment names the object that records the attachment.
	VolumeAttachment string
	UID              types.UID
	// Attached mirrors status.attached.
	Attached bool
	// Deleting is set once deletion of the VolumeAttachment was requested.
	Deleting bool
	// AttachError mirrors status.attachError.message.
	AttachError string
	// HiddenFromNodeStatus is set while a detach is under way: the node status must
	// not list the volume, so that kubelet does not mount it again.
	HiddenFromNodeStatus bool
	// DetachWantedSince is when the controller first wanted to detach a volume that
	// was still mounted; zero when no such wait is running.
	DetachWantedSince time.Time
}

// Reported tells whether node.status.volumesAttached should list the volume.
func (a Attachment) Reported() bool { return a.Attached && !a.HiddenFromNodeStatus }

// Observation is what a VolumeAttachment says about an attachment.
type Observation struct {
	Volume           csivolume.UniqueName
	Node             string
	VolumeAttachment string
	UID              types.UID
	Attached         bool
	Deleting         bool
	AttachError      string
}

// ActualState records the attachments that exist, from VolumeAttachment objects
// and from the controller's own writes, indexed by volume and by node. It also
// remembers VolumeAttachments whose volume could not be identified yet, by the PV
// they name, so that such a volume still counts as held.
type ActualState struct {
	mu          sync.RWMutex
	volumes     map[csivolume.UniqueName]map[string]*Attachment
	nodeVols    map[string]map[csivolume.UniqueName]struct{}
	byObject    map[string]*Attachment
	unresolved  map[string]UnresolvedAttachment
	unresolvedP map[string]map[string]struct{}
}

// UnresolvedAttachment is a VolumeAttachment whose volume is not known yet.
type UnresolvedAttachment struct {
	VolumeAttachment string
	PVName           string
	Node             string
}

// NewActualState returns an empty actual state.
func NewActualState() *ActualState {
	return &ActualState{
		volumes:     make(map[csivolume.UniqueName]map[string]*Attachment),
		nodeVols:    make(map[string]map[csivolume.UniqueName]struct{}),
		byObject:    make(map[string]*Attachment),
		unresolved:  make(map[string]UnresolvedAttachment),
		unresolvedP: make(map[string]map[string]struct{}),
	}
}

// Observe records what a VolumeAttachment says, keeping the controller's own marks.
// It reports whether the node status should change as a result.
func (s *ActualState) Observe(o Observation) (nodeStatusChanged bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.observeLocked(o)
}

// ObserveCreated records a VolumeAttachment the controller has just created, unless
// the informer has recorded that very object (same UID) already: by then the
// external-attacher may have attached it, and the new object's empty status must
// not overwrite that.
func (s *ActualState) ObserveCreated(o Observation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if att, ok := s.byObject[o.VolumeAttachment]; ok && att.UID == o.UID {
		return
	}
	s.observeLocked(o)
}

func (s *ActualState) observeLocked(o Observation) (nodeStatusChanged bool) {
	s.forgetUnresolvedLocked(o.VolumeAttachment)
	if old, ok := s.byObject[o.VolumeAttachment]; ok && (old.Volume != o.Volume || old.Node != o.Node) {
		s.removeLocked(old)
	}
	att, ok := s.volumes[o.Volume][o.Node]
	if !ok {
		att = &Attachment{Volume: o.Volume, Node: o.Node}
		nodes, ok := s.volumes[o.Volume]
		if !ok {
			nodes = make(map[string]*Attachment)
			s.volumes[o.Volume] = nodes
		}
		nodes[o.Node] = att
		addToIndex(s.nodeVols, o.Node, o.Volume)
	}
	wasReported := att.Reported()
	if att.UID != "" && o.UID != "" && att.UID != o.UID {
		// A new object of the same name: the marks were about the old one.
		att.Deleting, att.HiddenFromNodeStatus, att.DetachWantedSince = false, false, time.Time{}
	}
	att.VolumeAttachment = o.VolumeAttachment
	att.UID = o.UID
	att.Attached = o.Attached
	att.Deleting = att.Deleting || o.Deleting
	att.AttachError = o.AttachError
	s.byObject[o.VolumeAttachment] = att
	return wasReported != att.Reported()
}

// ObserveUnresolved records a VolumeAttachment whose volume cannot be identified
// yet (its PV is missing); it still holds the PV it names.
func (s *ActualState) ObserveUnresolved(u UnresolvedAttachment) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.byObject[u.VolumeAttachment]; ok {
		s.removeLocked(old)
	}
	s.forgetUnresolvedLocked(u.VolumeAttachment)
	s.unresolved[u.VolumeAttachment] = u
	if u.PVName != "" {
		addToIndex(s.unresolvedP, u.PVName, u.VolumeAttachment)
	}
}

// UnresolvedHolders returns the nodes other than except where a VolumeAttachment
// of unknown volume names the PV.
func (s *ActualState) UnresolvedHolders(pvName, except string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var nodes []string
	for name := range s.unresolvedP[pvName] {
		if n := s.unresolved[name].Node; n != except {
			nodes = append(nodes, n)
		}
	}
	slices.Sort(nodes)
	return nodes
}

// UnresolvedForPV returns the unidentified VolumeAttachments that name the PV.
func (s *ActualState) UnresolvedForPV(pvName string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Sorted(maps.Keys(s.unresolvedP[pvName]))
}

// Forget removes the attachment recorded for a VolumeAttachment that is gone and
// returns it.
func (s *ActualState) Forget(volumeAttachment string) (Attachment, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgetUnresolvedLocked(volumeAttachment)
	att, ok := s.byObject[volumeAttachment]
	if !ok {
		return Attachment{}, false
	}
	s.removeLocked(att)
	return *att, true
}

func (s *ActualState) removeLocked(att *Attachment) {
	delete(s.byObject, att.VolumeAttachment)
	if nodes, ok := s.volumes[att.Volume]; ok && nodes[att.Node] == att {
		delete(nodes, att.Node)
		if len(nodes) == 0 {
			delete(s.volumes, att.Volume)
		}
		removeFromIndex(s.nodeVols, att.Node, att.Volume)
	}
}

func (s *ActualState) forgetUnresolvedLocked(volumeAttachment string) {
	u, ok := s.unresolved[volumeAttachment]
	if !ok {
		return
	}
	delete(s.unresolved, volumeAttachment)
	removeFromIndex(s.unresolvedP, u.PVName, volumeAttachment)
}

// Attachments returns copies of the volume's attachments, sorted by node.
func (s *ActualState) Attachments(name csivolume.UniqueName) []Attachment {
	s.mu.RLock()
	defer s.mu.RUnlock()
	nodes := s.volumes[name]
	out := make([]Attachment, 0, len(nodes))
	for _, att := range nodes {
		out = append(out, *att)
	}
	slices.SortFunc(out, func(a, b Attachment) int {
		if a.Node < b.Node {
			return -1
		}
		if a.Node > b.Node {
			return 1
		}
		return 0
	})
	return out
}

// Get returns the attachment of the volume on the node.
func (s *ActualState) Get(name csivolume.UniqueName, node string) (Attachment, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	att, ok := s.volumes[name][node]
	if !ok {
		return Attachment{}, false
	}
	return *att, true
}

// VolumesOnNode returns the volumes with an attachment on the node.
func (s *ActualState) VolumesOnNode(node string) []csivolume.UniqueName {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return sortedVolumeNames(s.nodeVols[node])
}

// Volumes returns every volume with an attachment somewhere.
func (s *ActualState) Volumes() []csivolume.UniqueName {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]csivolume.UniqueName, 0, len(s.volumes))
	for name := range s.volumes {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// ReportedVolumes returns, sorted, the volumes node.status.volumesAttached of the
// node should list.
func (s *ActualState) ReportedVolumes(node string) []csivolume.UniqueName {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]csivolume.UniqueName, 0, len(s.nodeVols[node]))
	for name := range s.nodeVols[node] {
		if s.volumes[name][node].Reported() {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// SetHiddenFromNodeStatus marks or unmarks the attachment as one node status must
// not list. It reports whether anything changed.
func (s *ActualState) SetHiddenFromNodeStatus(name csivolume.UniqueName, node string, hidden bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	att, ok := s.volumes[name][node]
	if !ok || att.HiddenFromNodeStatus == hidden {
		return false
	}
	att.HiddenFromNodeStatus = hidden
	return true
}

// MarkDeleting records that deletion of the attachment's VolumeAttachment was
// requested.
func (s *ActualState) MarkDeleting(name csivolume.UniqueName, node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if att, ok := s.volumes[name][node]; ok {
		att.Deleting = true
	}
}

// DetachWantedSince returns when a detach of the mounted volume was first wanted,
// recording now as that moment if no wait was running.
func (s *ActualState) DetachWantedSince(name csivolume.UniqueName, node string, now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	att, ok := s.volumes[name][node]
	if !ok {
		return now
	}
	if att.DetachWantedSince.IsZero() {
		att.DetachWantedSince = now
	}
	return att.DetachWantedSince
}

// ClearDetachWanted ends a wait for unmount: the volume is wanted again.
func (s *ActualState) ClearDetachWanted(name csivolume.UniqueName, node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if att, ok := s.volumes[name][node]; ok {
		att.DetachWantedSince = time.Time{}
	}
}

// Counts returns how many attachments exist and how many of them are attached.
func (s *ActualState) Counts() (total, attached int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, att := range s.byObject {
		total++
		if att.Attached {
			attached++
		}
	}
	return total + len(s.unresolved), attached
}
