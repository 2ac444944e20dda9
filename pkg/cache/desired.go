package cache

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// DesiredState records, for every pod that has a node and is not terminated, the
// attachable volumes it needs, and from that which volume must be attached to which
// node. Entries stay while the pod exists, whether or not its node does: a deleted
// Node object does not mean kubelet has stopped using the volume.
type DesiredState struct {
	mu       sync.RWMutex
	pods     map[string]desiredPod
	volumes  map[volumename.UniqueName]*desiredVolume
	nodeVols map[string]map[volumename.UniqueName]struct{}
	// neededUntil holds, by volume and node, when the last pod there that
	// needed the volume went, until the reconciler takes it: a pod may come and
	// go between two reconciles of the volume, and the wait for unmount must
	// count from when it went, not from before it came.
	neededUntil map[volumename.UniqueName]map[string]time.Time
	now         func() time.Time
}

type desiredPod struct {
	ref     PodRef
	node    string
	volumes []volumename.UniqueName
}

type desiredVolume struct {
	spec  Volume
	nodes map[string]*desiredAttachment
}

type desiredAttachment struct {
	pods map[string]PodRef
	// waitingSince is set when the pods on this node were told that the volume
	// is held elsewhere, so that one wait makes one event, and says since when
	// they wait; zero when no such wait runs.
	waitingSince time.Time
}

// DesiredVolume is a copy of what the desired state says about one volume.
type DesiredVolume struct {
	Spec Volume
	// Nodes maps each node that needs the volume to the pods there that use it,
	// sorted by namespace/name.
	Nodes map[string][]PodRef
}

// NewDesiredState returns an empty desired state.
func NewDesiredState() *DesiredState {
	return &DesiredState{
		pods:        make(map[string]desiredPod),
		volumes:     make(map[volumename.UniqueName]*desiredVolume),
		nodeVols:    make(map[string]map[volumename.UniqueName]struct{}),
		neededUntil: make(map[volumename.UniqueName]map[string]time.Time),
		now:         time.Now,
	}
}

// SetPod records that the pod, on the node, needs exactly these volumes, replacing
// what was recorded for it before. It returns the volumes whose desired state
// changed, so that only those are reconciled.
func (d *DesiredState) SetPod(pod PodRef, node string, volumes []Volume) []volumename.UniqueName {
	d.mu.Lock()
	defer d.mu.Unlock()
	key := pod.Key()
	old, had := d.pods[key]
	names := make([]volumename.UniqueName, 0, len(volumes))
	changed := make(map[volumename.UniqueName]struct{})
	for _, v := range volumes {
		names = append(names, v.Name)
		if d.addPodVolume(pod, node, v) {
			changed[v.Name] = struct{}{}
		}
	}
	if had {
		for _, name := range old.volumes {
			if old.node == node && slices.Contains(names, name) {
				continue
			}
			if d.removePodVolume(key, old.node, name) {
				changed[name] = struct{}{}
			}
		}
	}
	if len(names) == 0 {
		delete(d.pods, key)
	} else {
		d.pods[key] = desiredPod{ref: pod, node: node, volumes: names}
	}
	return sortedVolumeNames(changed)
}

// DeletePod forgets the pod and returns the volumes whose desired state changed.
func (d *DesiredState) DeletePod(podKey string) []volumename.UniqueName {
	d.mu.Lock()
	defer d.mu.Unlock()
	old, ok := d.pods[podKey]
	if !ok {
		return nil
	}
	delete(d.pods, podKey)
	changed := make(map[volumename.UniqueName]struct{})
	for _, name := range old.volumes {
		if d.removePodVolume(podKey, old.node, name) {
			changed[name] = struct{}{}
		}
	}
	return sortedVolumeNames(changed)
}

// addPodVolume reports whether the set of nodes or pods for the volume changed.
func (d *DesiredState) addPodVolume(pod PodRef, node string, v Volume) bool {
	vol, ok := d.volumes[v.Name]
	if !ok {
		vol = &desiredVolume{nodes: make(map[string]*desiredAttachment)}
		d.volumes[v.Name] = vol
	}
	specChanged := !sameSpec(vol.spec, v)
	vol.spec = v
	att, ok := vol.nodes[node]
	if !ok {
		att = &desiredAttachment{pods: make(map[string]PodRef)}
		vol.nodes[node] = att
		addToIndex(d.nodeVols, node, v.Name)
	}
	key := pod.Key()
	if existing, ok := att.pods[key]; ok && existing == pod {
		return specChanged
	}
	att.pods[key] = pod
	return true
}

func (d *DesiredState) removePodVolume(podKey, node string, name volumename.UniqueName) bool {
	vol, ok := d.volumes[name]
	if !ok {
		return false
	}
	att, ok := vol.nodes[node]
	if !ok {
		return false
	}
	if _, ok := att.pods[podKey]; !ok {
		return false
	}
	delete(att.pods, podKey)
	if len(att.pods) == 0 {
		delete(vol.nodes, node)
		removeFromIndex(d.nodeVols, node, name)
		if d.neededUntil[name] == nil {
			d.neededUntil[name] = make(map[string]time.Time)
		}
		d.neededUntil[name][node] = d.now()
	}
	if len(vol.nodes) == 0 {
		delete(d.volumes, name)
	}
	return true
}

// PodEnded records that a pod on the node needed these volumes until now,
// whether or not the desired state ever held it: the populator evaluates a pod
// some time after the event that queued it, and a pod that came and went in that
// time is never held. It returns the volumes recorded: those no pod held on the
// node needs, whose wait for unmount must count from now.
func (d *DesiredState) PodEnded(node string, volumes []volumename.UniqueName) []volumename.UniqueName {
	d.mu.Lock()
	defer d.mu.Unlock()
	var recorded []volumename.UniqueName
	for _, name := range volumes {
		if vol, ok := d.volumes[name]; ok && vol.nodes[node] != nil {
			continue
		}
		if d.neededUntil[name] == nil {
			d.neededUntil[name] = make(map[string]time.Time)
		}
		d.neededUntil[name][node] = d.now()
		recorded = append(recorded, name)
	}
	return recorded
}

// NeededUntil returns, by node, when the volume was last needed there by a pod
// that has gone since the reconciler last took it (TakeNeededUntil).
func (d *DesiredState) NeededUntil(name volumename.UniqueName) map[string]time.Time {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return maps.Clone(d.neededUntil[name])
}

// TakeNeededUntil returns what NeededUntil does and forgets it: the reconciler
// takes it into the waits for unmount it keeps. It runs at every reconcile, and
// takes the write lock only when there is something to take.
func (d *DesiredState) TakeNeededUntil(name volumename.UniqueName) map[string]time.Time {
	d.mu.RLock()
	_, ok := d.neededUntil[name]
	d.mu.RUnlock()
	if !ok {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.neededUntil[name]
	delete(d.neededUntil, name)
	return out
}

func sameSpec(a, b Volume) bool {
	return a.Name == b.Name && a.Driver == b.Driver && a.Handle == b.Handle && a.PVName == b.PVName &&
		a.DisplayName == b.DisplayName && a.MultiAttach == b.MultiAttach && a.Migrated == b.Migrated && (a.InlineSpec == nil) == (b.InlineSpec == nil)
}

// Volume returns a copy of the desired state of one volume.
func (d *DesiredState) Volume(name volumename.UniqueName) (DesiredVolume, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	vol, ok := d.volumes[name]
	if !ok {
		return DesiredVolume{}, false
	}
	out := DesiredVolume{Spec: vol.spec, Nodes: make(map[string][]PodRef, len(vol.nodes))}
	for node, att := range vol.nodes {
		pods := make([]PodRef, 0, len(att.pods))
		for _, p := range att.pods {
			pods = append(pods, p)
		}
		slices.SortFunc(pods, func(a, b PodRef) int {
			return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
		})
		out.Nodes[node] = pods
	}
	return out, true
}

// NodesOf returns the nodes where some pod needs the volume, in no order.
func (d *DesiredState) NodesOf(name volumename.UniqueName) []string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if vol, ok := d.volumes[name]; ok {
		return slices.Collect(maps.Keys(vol.nodes))
	}
	return nil
}

// IsDesired tells whether some pod on the node needs the volume.
func (d *DesiredState) IsDesired(name volumename.UniqueName, node string) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	_, ok := d.nodeVols[node][name]
	return ok
}

// VolumesOnNode returns the volumes that pods on the node need.
func (d *DesiredState) VolumesOnNode(node string) []volumename.UniqueName {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return sortedVolumeNames(d.nodeVols[node])
}

// Volumes returns every volume some pod needs.
func (d *DesiredState) Volumes() []volumename.UniqueName {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make([]volumename.UniqueName, 0, len(d.volumes))
	for name := range d.volumes {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// VolumeCount returns how many volumes some pod needs.
func (d *DesiredState) VolumeCount() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return len(d.volumes)
}

// PodKeys returns the namespace/name of every pod recorded.
func (d *DesiredState) PodKeys() []string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make([]string, 0, len(d.pods))
	for key := range d.pods {
		out = append(out, key)
	}
	return out
}

// MarkMultiAttachReported records that the pods waiting for the volume on the node
// were told it is held elsewhere. It returns false if that was already recorded for
// this wait, true if the caller should send the event now.
func (d *DesiredState) MarkMultiAttachReported(name volumename.UniqueName, node string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	att := d.attachment(name, node)
	if att == nil || !att.waitingSince.IsZero() {
		return false
	}
	att.waitingSince = time.Now()
	return true
}

// ResetMultiAttachReported ends a multi-attach wait: the next one reports again.
func (d *DesiredState) ResetMultiAttachReported(name volumename.UniqueName, node string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if att := d.attachment(name, node); att != nil {
		att.waitingSince = time.Time{}
	}
}

func (d *DesiredState) attachment(name volumename.UniqueName, node string) *desiredAttachment {
	vol, ok := d.volumes[name]
	if !ok {
		return nil
	}
	return vol.nodes[node]
}
