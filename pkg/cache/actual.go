package cache

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// Attachment is one VolumeAttachment object for a volume on a node, or one the
// controller is creating: from the moment its create is sent it may exist, so it
// counts as holding the volume until the informer or a read from the API server
// shows otherwise. For an in-tree iSCSI or Fibre Channel volume, which kubelet
// attaches itself once node status lists it, an Attachment with no
// VolumeAttachment name records that the controller reports the volume attached
// to the node: node status is its only durable record.
type Attachment struct {
	Volume volumename.UniqueName
	Node   string
	// VolumeAttachment names the object; empty for a report-only attachment.
	VolumeAttachment string
	// UID is empty while the controller's create has no answer.
	UID types.UID
	// Seen is set once the informer has shown the object. An attachment that was
	// never seen is one the controller created, or tried to: it may or may not
	// exist, and only a write or read that answers for it settles that.
	Seen bool
	// Attached mirrors status.attached.
	Attached bool
	// Deleting is set once the object has a deletionTimestamp, or once the
	// controller's delete of it was accepted.
	Deleting bool
	// DeleteUnsettled is set when the controller's delete got no answer and a
	// read could not learn the outcome either: the object may be on its way out.
	DeleteUnsettled bool
	// AttachError and DetachError mirror status.attachError.message and
	// status.detachError.message.
	AttachError, DetachError string
	// MultiAttach tells whether the volume may be attached to several nodes, as
	// the volume's own spec (PV or inline spec) said when the object was seen.
	MultiAttach bool
	// Migrated is set when that spec was an in-tree volume translated to CSI.
	Migrated bool
}

// ReportOnly tells whether the attachment is an in-tree volume's report in node
// status rather than a VolumeAttachment.
func (a Attachment) ReportOnly() bool { return a.VolumeAttachment == "" }

// Unknown tells whether only a read from the API server can learn what became of
// the object: the informer never showed it (a create of it may or may not have
// made it), or its delete had an unknown outcome.
func (a Attachment) Unknown() bool { return !a.Seen || a.DeleteUnsettled }

// Observation is what a VolumeAttachment says about an attachment.
type Observation struct {
	Volume           volumename.UniqueName
	Node             string
	VolumeAttachment string
	UID              types.UID
	Attached         bool
	Deleting         bool
	AttachError      string
	DetachError      string
	MultiAttach      bool
	Migrated         bool
}

// OnNode is everything that exists of one volume on one node: usually one
// VolumeAttachment, but another tool may have made more, and each one holds the
// volume in its own right.
type OnNode struct {
	Volume volumename.UniqueName
	Node   string
	// Objects are the attachments of the volume to the node, sorted by name.
	Objects []Attachment
	// HiddenFromNodeStatus is set while a detach is under way or was decided: node
	// status must not list the volume, so that kubelet does not mount it again.
	HiddenFromNodeStatus bool
	// UnmountWaitStarted is when the controller started waiting for kubelet to
	// unmount the volume from a node that no longer needs it; zero when no such
	// wait runs.
	UnmountWaitStarted time.Time
}

// Attached tells whether some object reports the volume attached.
func (o OnNode) Attached() bool {
	return slices.ContainsFunc(o.Objects, func(a Attachment) bool { return a.Attached })
}

// Deleting tells whether every object is being deleted, or may be.
func (o OnNode) Deleting() bool {
	return len(o.Objects) > 0 && !slices.ContainsFunc(o.Objects, func(a Attachment) bool { return !a.Deleting && !a.DeleteUnsettled })
}

// MultiAttach tells whether the volume's own spec allows several nodes; false
// when any object says otherwise or none could say.
func (o OnNode) MultiAttach() bool {
	return len(o.Objects) > 0 && !slices.ContainsFunc(o.Objects, func(a Attachment) bool { return !a.MultiAttach })
}

// Migrated tells whether some object's volume is an in-tree volume translated to
// CSI.
func (o OnNode) Migrated() bool {
	return slices.ContainsFunc(o.Objects, func(a Attachment) bool { return a.Migrated })
}

// Reported tells whether node.status.volumesAttached should list the volume.
func (o OnNode) Reported() bool { return o.Attached() && !o.HiddenFromNodeStatus }

// pair holds the objects of one volume on one node and the controller's marks.
type pair struct {
	objects map[string]*Attachment
	hidden  bool
	// hideForce is the force rule of the detach that hid the volume.
	hideForce          ForceRule
	unmountWaitStarted time.Time
}

func (p *pair) view(volume volumename.UniqueName, node string) OnNode {
	out := OnNode{Volume: volume, Node: node, HiddenFromNodeStatus: p.hidden, UnmountWaitStarted: p.unmountWaitStarted}
	for _, name := range slices.Sorted(maps.Keys(p.objects)) {
		out.Objects = append(out.Objects, *p.objects[name])
	}
	return out
}

func (p *pair) reported() bool {
	return !p.hidden && p.attached()
}

// ActualState records the attachments that exist, from VolumeAttachment objects
// and from the controller's own creates, indexed by object name, by volume and by
// node. It also remembers VolumeAttachments whose volume could not be identified
// yet, by the PV they name, so that such a volume still counts as held.
type ActualState struct {
	mu             sync.RWMutex
	objects        map[string]*Attachment
	pairs          map[volumename.UniqueName]map[string]*pair
	nodeVols       map[string]map[volumename.UniqueName]struct{}
	unresolved     map[string]UnresolvedAttachment
	unresolvedByPV map[string]map[string]struct{}
	// incomplete says why the state may lack a VolumeAttachment that exists;
	// empty when it lacks none that the informer has not had time to show.
	incomplete string
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
		objects:        make(map[string]*Attachment),
		pairs:          make(map[volumename.UniqueName]map[string]*pair),
		nodeVols:       make(map[string]map[volumename.UniqueName]struct{}),
		unresolved:     make(map[string]UnresolvedAttachment),
		unresolvedByPV: make(map[string]map[string]struct{}),
	}
}

// Observe records what the informer shows of a VolumeAttachment. It reports
// whether the node's status should change as a result.
func (s *ActualState) Observe(o Observation) (nodeStatusChanged bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	att := s.objects[o.VolumeAttachment]
	if att != nil && olderThanCreate(*att, o) {
		return false
	}
	s.forgetUnresolvedLocked(o.VolumeAttachment)
	if att != nil && (att.Volume != o.Volume || att.Node != o.Node) {
		nodeStatusChanged = s.removeLocked(att)
		att = nil
	}
	p := s.pairLocked(o.Volume, o.Node)
	wasReported := p.reported()
	if att == nil || (att.UID != "" && att.UID != o.UID) {
		att = &Attachment{}
	}
	// What the informer shows may predate the controller's delete: only a read
	// made after it settles an unknown outcome.
	unsettled := att.DeleteUnsettled && !o.Deleting
	*att = Attachment{
		DeleteUnsettled:  unsettled,
		Volume:           o.Volume,
		Node:             o.Node,
		VolumeAttachment: o.VolumeAttachment,
		UID:              o.UID,
		Seen:             true,
		Attached:         o.Attached,
		Deleting:         o.Deleting,
		AttachError:      o.AttachError,
		DetachError:      o.DetachError,
		MultiAttach:      o.MultiAttach,
		Migrated:         o.Migrated,
	}
	s.objects[o.VolumeAttachment] = att
	p.objects[o.VolumeAttachment] = att
	return nodeStatusChanged || wasReported != p.reported()
}

// olderThanCreate tells whether the informer shows an object that the
// controller's create of that name, not yet seen, followed: a create succeeds
// only once an older object of its name is gone, and an informer that lags may
// show the older one's last events after the create. The create's answer names
// its object's UID; without an answer, an object being deleted is taken for an
// older one, and the record stands for the create until a read or the informer
// settles it.
func olderThanCreate(att Attachment, o Observation) bool {
	if att.Seen {
		return false
	}
	if att.UID != "" {
		return o.UID != att.UID
	}
	return o.Deleting
}

// BeginCreate records, before the controller sends the create, that the
// VolumeAttachment may exist from now on. It returns false, recording nothing,
// when an object of that name is recorded already.
func (s *ActualState) BeginCreate(volume volumename.UniqueName, node, name string, multiAttach bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.objects[name]; ok {
		return false
	}
	att := &Attachment{Volume: volume, Node: node, VolumeAttachment: name, MultiAttach: multiAttach}
	s.objects[name] = att
	s.pairLocked(volume, node).objects[name] = att
	return true
}

// AddReportOnly records that an in-tree iSCSI or Fibre Channel volume is attached
// to the node: node status is to list it, and it holds the volume there until
// ForgetReportOnly. It reports whether the node's status should change.
func (s *ActualState) AddReportOnly(volume volumename.UniqueName, node string, multiAttach bool) (nodeStatusChanged bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pairLocked(volume, node)
	if _, ok := p.objects[""]; ok {
		return false
	}
	wasReported := p.reported()
	p.objects[""] = &Attachment{Volume: volume, Node: node, Seen: true, Attached: true, MultiAttach: multiAttach}
	return wasReported != p.reported()
}

// ForgetReportOnly removes the report-only attachment of the volume to the node,
// once node status no longer lists it.
func (s *ActualState) ForgetReportOnly(volume volumename.UniqueName, node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pairs[volume][node]
	if !ok {
		return
	}
	delete(p.objects, "")
	s.dropIfEmptyLocked(volume, node, p)
}

// Created records the UID the API server gave an object the controller created,
// unless the informer has shown that object, or shown it gone, in the meantime.
func (s *ActualState) Created(name string, uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if att, ok := s.objects[name]; ok && !att.Seen && att.UID == "" {
		att.UID = uid
	}
}

// ObserveUnresolved records a VolumeAttachment whose volume cannot be identified
// yet (its PV is missing); it still holds the PV it names.
func (s *ActualState) ObserveUnresolved(u UnresolvedAttachment) (nodeStatusChanged bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.objects[u.VolumeAttachment]; ok {
		nodeStatusChanged = s.removeLocked(old)
	}
	s.forgetUnresolvedLocked(u.VolumeAttachment)
	s.unresolved[u.VolumeAttachment] = u
	if u.PVName != "" {
		addToIndex(s.unresolvedByPV, u.PVName, u.VolumeAttachment)
	}
	return nodeStatusChanged
}

// UnresolvedOnNode returns, sorted, the unidentified VolumeAttachments of the node.
func (s *ActualState) UnresolvedOnNode(node string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []string
	for name, u := range s.unresolved {
		if u.Node == node {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// UnresolvedForPV returns the unidentified VolumeAttachments that name the PV.
func (s *ActualState) UnresolvedForPV(pvName string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Sorted(maps.Keys(s.unresolvedByPV[pvName]))
}

// Forget removes what is recorded of a VolumeAttachment that is gone: any object
// of that name when uid is empty, else only the object with that UID. A create
// without an answer yet stays: the object gone may be an older one of that name.
// It returns the attachment it removed.
func (s *ActualState) Forget(name string, uid types.UID) (Attachment, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgetUnresolvedLocked(name)
	att, ok := s.objects[name]
	if !ok || (uid != "" && att.UID != uid) {
		return Attachment{}, false
	}
	s.removeLocked(att)
	return *att, true
}

// removeLocked drops one object and reports whether its node's status changes.
func (s *ActualState) removeLocked(att *Attachment) bool {
	delete(s.objects, att.VolumeAttachment)
	nodes := s.pairs[att.Volume]
	p, ok := nodes[att.Node]
	if !ok || p.objects[att.VolumeAttachment] != att {
		return false
	}
	wasReported := p.reported()
	delete(p.objects, att.VolumeAttachment)
	if s.dropIfEmptyLocked(att.Volume, att.Node, p) {
		return wasReported
	}
	return wasReported != p.reported()
}

// dropIfEmptyLocked forgets the pair once nothing of the volume is left on the
// node, and reports whether it did.
func (s *ActualState) dropIfEmptyLocked(volume volumename.UniqueName, node string, p *pair) bool {
	if len(p.objects) > 0 {
		return false
	}
	nodes := s.pairs[volume]
	delete(nodes, node)
	if len(nodes) == 0 {
		delete(s.pairs, volume)
	}
	removeFromIndex(s.nodeVols, node, volume)
	return true
}

func (s *ActualState) pairLocked(volume volumename.UniqueName, node string) *pair {
	nodes, ok := s.pairs[volume]
	if !ok {
		nodes = make(map[string]*pair)
		s.pairs[volume] = nodes
	}
	p, ok := nodes[node]
	if !ok {
		p = &pair{objects: make(map[string]*Attachment)}
		nodes[node] = p
		addToIndex(s.nodeVols, node, volume)
	}
	return p
}

func (s *ActualState) forgetUnresolvedLocked(name string) {
	u, ok := s.unresolved[name]
	if !ok {
		return
	}
	delete(s.unresolved, name)
	removeFromIndex(s.unresolvedByPV, u.PVName, name)
}

// Volume returns what exists of the volume on each node, sorted by node.
func (s *ActualState) Volume(name volumename.UniqueName) []OnNode {
	s.mu.RLock()
	defer s.mu.RUnlock()
	nodes := s.pairs[name]
	out := make([]OnNode, 0, len(nodes))
	for _, node := range slices.Sorted(maps.Keys(nodes)) {
		out = append(out, nodes[node].view(name, node))
	}
	return out
}

// Get returns what exists of the volume on the node.
func (s *ActualState) Get(name volumename.UniqueName, node string) (OnNode, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.pairs[name][node]
	if !ok {
		return OnNode{}, false
	}
	return p.view(name, node), true
}

// Object returns the attachment recorded under a VolumeAttachment name.
func (s *ActualState) Object(name string) (Attachment, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	att, ok := s.objects[name]
	if !ok {
		return Attachment{}, false
	}
	return *att, true
}

// ObjectNames returns the name of every VolumeAttachment recorded, identified or
// not, with the UID known for it (empty while a create has no answer).
func (s *ActualState) ObjectNames() map[string]types.UID {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]types.UID, len(s.objects)+len(s.unresolved))
	for name, att := range s.objects {
		if att.Seen {
			out[name] = att.UID
		}
	}
	for name := range s.unresolved {
		out[name] = ""
	}
	return out
}

// Unsettled returns the attachments whose existence only the API server can
// settle: those the controller created, or tried to, that the informer has not
// shown, and those whose delete had an unknown outcome.
func (s *ActualState) Unsettled() []Attachment {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []Attachment
	for _, att := range s.objects {
		if att.Unknown() {
			out = append(out, *att)
		}
	}
	slices.SortFunc(out, func(a, b Attachment) int { return strings.Compare(a.VolumeAttachment, b.VolumeAttachment) })
	return out
}

// Holders returns, sorted, the nodes other than except that hold the volume: a
// VolumeAttachment for it exists there, or may exist (a create without an answer),
// or a VolumeAttachment of unknown volume names the volume's PV there.
func (s *ActualState) Holders(name volumename.UniqueName, pvName, except string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	set := make(map[string]struct{})
	for node := range s.pairs[name] {
		if node != except {
			set[node] = struct{}{}
		}
	}
	if pvName != "" {
		for va := range s.unresolvedByPV[pvName] {
			if n := s.unresolved[va].Node; n != except {
				set[n] = struct{}{}
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// SetIncomplete records why the state may lack a VolumeAttachment that exists,
// or, with "", that it is known to lack none.
func (s *ActualState) SetIncomplete(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.incomplete = reason
}

// Incomplete returns why the state may lack a VolumeAttachment that exists: while
// it may, Holders can miss a node that holds a volume that has VolumeAttachments
// (an in-tree iSCSI or Fibre Channel volume has none). It returns "" otherwise.
func (s *ActualState) Incomplete() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.incomplete
}

// VolumesOnNode returns the volumes with an attachment on the node.
func (s *ActualState) VolumesOnNode(node string) []volumename.UniqueName {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return sortedVolumeNames(s.nodeVols[node])
}

// AttachedOnNode returns the volumes of which an object on the node is attached,
// in no order.
func (s *ActualState) AttachedOnNode(node string) []volumename.UniqueName {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []volumename.UniqueName
	for name := range s.nodeVols[node] {
		if p := s.pairs[name][node]; p != nil && p.attached() {
			out = append(out, name)
		}
	}
	return out
}

// NodesWithObjects returns the nodes where an object of the volume is recorded,
// in no order.
func (s *ActualState) NodesWithObjects(name volumename.UniqueName) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []string
	for node, p := range s.pairs[name] {
		if len(p.objects) > 0 {
			out = append(out, node)
		}
	}
	return out
}

// HasNode tells whether anything is recorded on the node, identified or not.
func (s *ActualState) HasNode(node string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.nodeVols[node]) > 0 {
		return true
	}
	for _, u := range s.unresolved {
		if u.Node == node {
			return true
		}
	}
	return false
}

// Volumes returns every volume with an attachment somewhere.
func (s *ActualState) Volumes() []volumename.UniqueName {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Sorted(maps.Keys(s.pairs))
}

// ReportedVolumes returns, sorted, the volumes node.status.volumesAttached of the
// node should list.
func (s *ActualState) ReportedVolumes(node string) []volumename.UniqueName {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]volumename.UniqueName, 0, len(s.nodeVols[node]))
	for name := range s.nodeVols[node] {
		if s.pairs[name][node].reported() {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// HasReportOnly tells whether an in-tree iSCSI or Fibre Channel volume is
// recorded on the node, reported there or being detached.
func (s *ActualState) HasReportOnly(node string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for name := range s.nodeVols[node] {
		if _, ok := s.pairs[name][node].objects[""]; ok {
			return true
		}
	}
	return false
}

// HideForDetach marks the volume on the node as one node status must not list,
// for a detach under the force rule: the rule that lets the volume leave node
// status while the node may still have it mounted. It reports whether the
// node's status changes.
func (s *ActualState) HideForDetach(name volumename.UniqueName, node string, force ForceRule) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pairs[name][node]
	if !ok {
		return false
	}
	was := p.reported()
	p.hidden, p.hideForce = true, force
	return was != p.reported()
}

// DetachForce returns the force rule of the detach that hid the volume on the
// node, and whether a detach did: false when the volume is not recorded there,
// or not hidden.
func (s *ActualState) DetachForce(name volumename.UniqueName, node string) (ForceRule, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if p, ok := s.pairs[name][node]; ok && p.hidden {
		return p.hideForce, true
	}
	return NotForced, false
}

// SetHiddenFromNodeStatus marks or unmarks the volume on the node as one node
// status must not list. It reports whether the node's status changes.
func (s *ActualState) SetHiddenFromNodeStatus(name volumename.UniqueName, node string, hidden bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pairs[name][node]
	if !ok || p.hidden == hidden {
		return false
	}
	was := p.reported()
	p.hidden, p.hideForce = hidden, NotForced
	return was != p.reported()
}

// MarkDeleting records that the API server accepted the delete of the object.
func (s *ActualState) MarkDeleting(name string, uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if att, ok := s.objects[name]; ok && (uid == "" || att.UID == "" || att.UID == uid) {
		att.Deleting = true
	}
}

// SetDeleteUnsettled records whether the outcome of the controller's delete of
// the object is unknown.
func (s *ActualState) SetDeleteUnsettled(name string, uid types.UID, unsettled bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if att, ok := s.objects[name]; ok && (uid == "" || att.UID == "" || att.UID == uid) {
		att.DeleteUnsettled = unsettled
	}
}

// StartUnmountWait starts the wait for kubelet to unmount the volume from the
// node, unless it runs already, and returns when it started. A wait that runs
// starts again at neededUntil if a pod needed the volume there after the wait
// began (one that came and went between two reconciles).
func (s *ActualState) StartUnmountWait(name volumename.UniqueName, node string, now, neededUntil time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pairs[name][node]
	if !ok {
		return now
	}
	switch {
	case p.unmountWaitStarted.IsZero():
		p.unmountWaitStarted = now
	case neededUntil.After(p.unmountWaitStarted):
		p.unmountWaitStarted = neededUntil
	}
	return p.unmountWaitStarted
}

// EndUnmountWait ends a wait for unmount: the volume is wanted on the node again.
func (s *ActualState) EndUnmountWait(name volumename.UniqueName, node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.pairs[name][node]; ok {
		p.unmountWaitStarted = time.Time{}
	}
}

// Counts returns how many VolumeAttachments are recorded and how many of them are
// attached.
func (s *ActualState) Counts() (total, attached int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, att := range s.objects {
		total++
		if att.Attached {
			attached++
		}
	}
	return total + len(s.unresolved), attached
}
