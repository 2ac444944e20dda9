// Package simcheck checks the attach/detach safety rules after every write a
// fakeapi store applies, against the API's state at that instant and what the
// simulated kubelets have mounted, and checks convergence at the end:
//
//  1. a single-attach volume (access modes listed, neither ReadWriteMany nor
//     ReadOnlyMany) never has VolumeAttachments, in any state, on two nodes;
//  2. a VolumeAttachment's deletion (deletionTimestamp set, or the object removed
//     without one) never happens while the kubelet of its node has the volume
//     mounted, unless the node carries the out-of-service taint, or the node is
//     NotReady or deleted and no pod there has needed the volume for
//     MaxWaitForUnmount. A node deleted while tainted counts as still tainted.
//     Since a request may be held back by an injected delay, a deletion also
//     counts as allowed if the rule held within Grace before it; and since the
//     controller sees pods through informers that an injected delay or a relist
//     holds back (a pod that came and went inside a watch gap is never seen), the
//     wait may count from up to Grace before the last pod there went.
//  3. an in-tree iSCSI or Fibre Channel volume, which has no VolumeAttachment and
//     is attached by node status listing it, is never listed in the
//     volumesAttached of a node while kubelet on another node may have it mounted,
//     if it is a single-attach PV: has it mounted, or lists it in volumesInUse
//     and has done so continuously since a version of its node whose
//     volumesAttached listed it too (kubelet mounts only what both lists show).
//     As node status is written one node at a time, the rule is judged when a
//     node's listing of the volume begins and when a kubelet's chance to mount it
//     begins. As with VolumeAttachments, whose deletion rule 2 judges and which
//     rule 1 no longer counts once gone, a node the controller took the volume
//     off (judged by rule 4) no longer counts until it lists it again, whatever
//     it still has mounted; nor does a node whose force-detach conditions (as in
//     rule 2) hold; nor one whose Node object, with its status, the only record
//     of the attachment, was deleted before the running controller was ready (it
//     lists nodes on its way there), the volume not listed there since (no
//     controller can know it was attached there, nor can
//     kube-controller-manager).
//  4. such a volume never leaves the volumesAttached of a node while the kubelet
//     there has it mounted, unless rule 2's force-detach conditions hold: for it,
//     that is the detach.
package simcheck

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/attachdetach-controller/attachdetach-controller/internal/fakeapi"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
	"github.com/attachdetach-controller/attachdetach-controller/internal/simworld"
)

// Rules are the controller's settings the checker judges force detaches by.
type Rules struct {
	// MaxWait is the wait for unmount before a force detach from a node not
	// Ready; Grace how long a force rule is still honoured once it ended (a
	// decision made under it may still be on its way).
	MaxWait, Grace time.Duration
	// NeverForce tells whether a volume is never force-detached on the timeout.
	NeverForce func(volume string) bool
	// DetachOnShutdownTaint lets a node not Ready with the cloud provider's
	// shutdown taint lose its volumes at once.
	DetachOnShutdownTaint bool
}

// Checker is a fakeapi Observer.
type Checker struct {
	rules  Rules
	mounts *simworld.Mounts
	report func(string)

	mu         sync.Mutex
	violations []string
	wanted     map[simworld.NodeVolume]bool
	// unwantedSince is when a volume stopped being needed on a node; a volume
	// never needed there is absent.
	unwantedSince map[simworld.NodeVolume]time.Time
	health        map[string]*nodeHealth
	// mayMount holds the volumes each node's kubelet may mount or have mounted by
	// what its status said: listed in volumesInUse continuously since a version
	// that listed them in volumesAttached too.
	mayMount map[simworld.NodeVolume]bool
	// lastListed is when a write of a node last left a volume listed in its
	// volumesAttached, lastRemoved when a write of the node took it out.
	lastListed, lastRemoved map[simworld.NodeVolume]time.Time
	// ready is when the last controller incarnation became ready.
	ready time.Time
}

// nodeHealth is when a node's force-detach conditions began and ended.
type nodeHealth struct {
	unhealthy, outOfService bool
	// shutdown: not Ready with the cloud provider's shutdown taint;
	// shutdownEndedAt when that last ended.
	shutdown        bool
	shutdownEndedAt time.Time
	// healthyAt is when it last became Ready again (zero: never), taintRemovedAt
	// when it last lost the out-of-service taint.
	unhealthySince, healthyAt, taintRemovedAt time.Time
	// deletions are the times its Node object was deleted, oldest first.
	deletions []time.Time
}

// New returns a checker; report is told of each violation as it happens.
func New(rules Rules, mounts *simworld.Mounts, report func(string)) *Checker {
	if rules.NeverForce == nil {
		rules.NeverForce = func(string) bool { return false }
	}
	return &Checker{
		rules: rules, mounts: mounts, report: report,
		wanted: map[simworld.NodeVolume]bool{}, unwantedSince: map[simworld.NodeVolume]time.Time{}, health: map[string]*nodeHealth{},
		mayMount: map[simworld.NodeVolume]bool{}, lastListed: map[simworld.NodeVolume]time.Time{}, lastRemoved: map[simworld.NodeVolume]time.Time{},
	}
}

// ControllerReady tells the checker that a controller incarnation, which lists
// what exists as it starts, is ready now.
func (c *Checker) ControllerReady() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ready = time.Now()
}

// Violations returns the violations seen so far.
func (c *Checker) Violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.violations)
}

// Violate records a violation found outside the API's writes.
func (c *Checker) Violate(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.violate(format, args...)
}

func (c *Checker) violate(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	c.violations = append(c.violations, msg)
	c.report(msg)
}

// Observe is the store's observer.
func (c *Checker) Observe(r fakeapi.Reader, w fakeapi.Write) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	switch w.Ref.Resource {
	case fakeapi.Pods, fakeapi.PVCs, fakeapi.PVs, fakeapi.CSIDrivers:
		c.updateWanted(r, now)
	case fakeapi.Nodes:
		c.updateHealth(w.Ref.Name, w.New, now)
		c.checkReportOnly(r, w, now)
	case fakeapi.VolumeAttachments:
		c.checkDeletion(r, w, now)
		c.checkSingleAttach(r)
	}
}

func (c *Checker) updateWanted(r fakeapi.Reader, now time.Time) {
	wanted := map[simworld.NodeVolume]bool{}
	for nv := range simworld.Wanted(r) {
		wanted[nv] = true
		delete(c.unwantedSince, nv)
	}
	for nv := range c.wanted {
		if !wanted[nv] {
			c.unwantedSince[nv] = now
		}
	}
	c.wanted = wanted
}

func (c *Checker) updateHealth(name string, obj any, now time.Time) {
	h, ok := c.health[name]
	if !ok {
		h = &nodeHealth{}
		c.health[name] = h
	}
	node, _ := obj.(*corev1.Node)
	if node == nil {
		h.deletions = append(h.deletions, now)
	}
	unhealthy := node == nil || !sim.Ready(node)
	// A node deleted while out of service stays shut down.
	oos := h.outOfService
	if node != nil {
		oos = simworld.OutOfService(node)
	}
	switch {
	case unhealthy && !h.unhealthy:
		h.unhealthySince = now
	case !unhealthy && h.unhealthy:
		h.healthyAt = now
	}
	if !oos && h.outOfService {
		h.taintRemovedAt = now
	}
	shutdown := h.shutdown
	if node != nil {
		shutdown = unhealthy && simworld.ShutdownTainted(node)
	}
	if !shutdown && h.shutdown {
		h.shutdownEndedAt = now
	}
	h.unhealthy, h.outOfService, h.shutdown = unhealthy, oos, shutdown
}

// forceAllowed tells whether rule 2 lets the volume be detached from the node
// while mounted.
func (c *Checker) forceAllowed(node, volume string, now time.Time) bool {
	h, ok := c.health[node]
	if !ok {
		return false
	}
	if h.outOfService || (!h.taintRemovedAt.IsZero() && now.Sub(h.taintRemovedAt) <= c.rules.Grace) {
		return true
	}
	if c.rules.DetachOnShutdownTaint && (h.shutdown || (!h.shutdownEndedAt.IsZero() && now.Sub(h.shutdownEndedAt) <= c.rules.Grace)) {
		return true
	}
	if c.wanted[simworld.NodeVolume{Node: node, Volume: volume}] || c.rules.NeverForce(volume) {
		return false
	}
	// The last instant the node was unhealthy, if within the grace.
	last := now
	if !h.unhealthy {
		if h.healthyAt.IsZero() || now.Sub(h.healthyAt) > c.rules.Grace {
			return false
		}
		last = h.healthyAt
	}
	return last.Sub(c.unwantedSince[simworld.NodeVolume{Node: node, Volume: volume}]) >= c.rules.MaxWait-c.rules.Grace
}

func (c *Checker) checkDeletion(r fakeapi.Reader, w fakeapi.Write, now time.Time) {
	old, _ := w.Old.(*storagev1.VolumeAttachment)
	if old == nil || old.DeletionTimestamp != nil {
		return
	}
	if va, _ := w.New.(*storagev1.VolumeAttachment); va != nil && va.DeletionTimestamp == nil {
		return
	}
	vol, ok := attachmentVolume(r, old)
	if !ok || !c.mounts.Mounted(old.Spec.NodeName, vol) || c.forceAllowed(old.Spec.NodeName, vol, now) {
		return
	}
	c.violate("INVARIANT mounted-detach: %s deleted VolumeAttachment %s (%s on %s) while kubelet on %s has it mounted; node %s",
		w.Actor, old.Name, vol, old.Spec.NodeName, old.Spec.NodeName, c.describeNode(r, old.Spec.NodeName, vol, now))
}

func (c *Checker) describeNode(r fakeapi.Reader, name, vol string, now time.Time) string {
	s := "deleted"
	if node, ok := fakeapi.Get[*corev1.Node](r, "", name); ok {
		s = fmt.Sprintf("Ready=%v out-of-service=%v volumesInUse=%v", sim.Ready(node), simworld.OutOfService(node), node.Status.VolumesInUse)
	}
	nv := simworld.NodeVolume{Node: name, Volume: vol}
	if c.wanted[nv] {
		return s + ", volume still needed by a pod there"
	}
	if since, ok := c.unwantedSince[nv]; ok {
		return s + fmt.Sprintf(", volume unneeded there for %s", now.Sub(since))
	}
	return s
}

// attachmentVolume returns the unique name of a VolumeAttachment's volume.
func attachmentVolume(r fakeapi.Reader, va *storagev1.VolumeAttachment) (string, bool) {
	if va.Spec.Source.PersistentVolumeName == nil {
		return "", false
	}
	v, ok := simworld.PVVolume(r, *va.Spec.Source.PersistentVolumeName)
	return v.Name, ok
}

func (c *Checker) checkSingleAttach(r fakeapi.Reader) {
	nodes := map[string]map[string]bool{}
	for _, va := range fakeapi.List[*storagev1.VolumeAttachment](r) {
		if va.Spec.Source.PersistentVolumeName == nil {
			continue
		}
		pv := *va.Spec.Source.PersistentVolumeName
		if v, ok := simworld.PVVolume(r, pv); !ok || !v.SingleAttach {
			continue
		}
		if nodes[pv] == nil {
			nodes[pv] = map[string]bool{}
		}
		nodes[pv][va.Spec.NodeName] = true
	}
	for _, pv := range slices.Sorted(maps.Keys(nodes)) {
		if len(nodes[pv]) > 1 {
			c.violate("INVARIANT single-attach: single-attach volume %s has VolumeAttachments on nodes %v", pv, slices.Sorted(maps.Keys(nodes[pv])))
		}
	}
}

// checkReportOnly checks rules 3 and 4 on a write of a node.
func (c *Checker) checkReportOnly(r fakeapi.Reader, w fakeapi.Write, now time.Time) {
	name := w.Ref.Name
	old, _ := w.Old.(*corev1.Node)
	node, _ := w.New.(*corev1.Node)
	wasListed, listed := attachedVolumes(old), attachedVolumes(node)
	if node != nil {
		for _, v := range slices.Sorted(maps.Keys(wasListed)) {
			if listed[v] {
				continue
			}
			c.lastRemoved[simworld.NodeVolume{Node: name, Volume: v}] = now
			if simworld.ReportOnlyName(v) && c.mounts.Mounted(name, v) && !c.forceAllowed(name, v, now) {
				c.violate("INVARIANT mounted-detach: %s took %s out of the volumesAttached of node %s while kubelet there has it mounted; node %s",
					w.Actor, v, name, c.describeNode(r, name, v, now))
			}
		}
	}
	for v := range listed {
		c.lastListed[simworld.NodeVolume{Node: name, Volume: v}] = now
	}
	began := c.updateMayMount(name, node, listed)
	single := singleAttachReportOnly(r)
	for _, v := range slices.Sorted(maps.Keys(single)) {
		if listed[v] && !wasListed[v] {
			for _, other := range slices.Sorted(maps.Keys(c.health)) {
				if other != name && c.mayHaveMounted(other, v) && !c.released(other, v) && !c.forceAllowed(other, v, now) && !c.recordLost(other, v) {
					c.violate("INVARIANT single-attach: %s listed single-attach volume %s (PV %s) in the volumesAttached of node %s while kubelet on %s may have it mounted; node %s %s",
						w.Actor, v, single[v], name, other, other, c.describeNode(r, other, v, now))
				}
			}
		}
		if !began[v] || c.forceAllowed(name, v, now) {
			continue
		}
		for _, n := range fakeapi.List[*corev1.Node](r) {
			if n.Name != name && attachedVolumes(n)[v] {
				c.violate("INVARIANT single-attach: kubelet on %s may mount single-attach volume %s (PV %s) since %s's write, while node %s lists it in volumesAttached too",
					name, v, single[v], w.Actor, n.Name)
			}
		}
	}
}

// updateMayMount brings the node's mayMount entries up to date with the node as
// written (nil: deleted) and returns the volumes its kubelet may now mount that
// it could not before.
func (c *Checker) updateMayMount(name string, node *corev1.Node, listed map[string]bool) map[string]bool {
	inUse := map[string]bool{}
	if node != nil {
		for _, v := range node.Status.VolumesInUse {
			inUse[string(v)] = true
		}
	}
	for nv := range c.mayMount {
		if nv.Node == name && !inUse[nv.Volume] {
			delete(c.mayMount, nv)
		}
	}
	began := map[string]bool{}
	for v := range inUse {
		nv := simworld.NodeVolume{Node: name, Volume: v}
		if listed[v] && !c.mayMount[nv] {
			c.mayMount[nv] = true
			began[v] = true
		}
	}
	return began
}

// mayHaveMounted tells whether kubelet on the node has the volume mounted, or
// may mount it by what the node's status has said.
func (c *Checker) mayHaveMounted(node, volume string) bool {
	return c.mounts.Mounted(node, volume) || c.mayMount[simworld.NodeVolume{Node: node, Volume: volume}]
}

// released tells whether the last change to the node's listing of the volume
// was a write of the node that took it out.
func (c *Checker) released(node, volume string) bool {
	nv := simworld.NodeVolume{Node: node, Volume: volume}
	removed, ok := c.lastRemoved[nv]
	return ok && !removed.Before(c.lastListed[nv])
}

// recordLost tells whether the only record of a report-only attachment of the
// volume to the node, the node's status, went with its Node object before the
// running controller was ready, and the volume has not been listed there since.
// Any such deletion counts, not only the last: a node created again and deleted
// again, the volume never listed on it in between, gave no controller the
// record back.
func (c *Checker) recordLost(node, volume string) bool {
	listed := c.lastListed[simworld.NodeVolume{Node: node, Volume: volume}]
	for _, deleted := range c.health[node].deletions {
		if c.ready.After(deleted) && !listed.After(deleted) {
			return true
		}
	}
	return false
}

// attachedVolumes returns the volumes a node's status.volumesAttached lists;
// none for a nil node.
func attachedVolumes(node *corev1.Node) map[string]bool {
	out := map[string]bool{}
	if node != nil {
		for _, av := range node.Status.VolumesAttached {
			out[string(av.Name)] = true
		}
	}
	return out
}

// singleAttachReportOnly returns the single-attach iSCSI and Fibre Channel PVs,
// by unique volume name.
func singleAttachReportOnly(r fakeapi.Reader) map[string]string {
	out := map[string]string{}
	for _, pv := range fakeapi.List[*corev1.PersistentVolume](r) {
		if v, ok := simworld.PVVolume(r, pv.Name); ok && v.ReportOnly() && v.SingleAttach {
			out[v.Name] = pv.Name
		}
	}
	return out
}

// Converged returns what keeps the API from the state a correct controller
// reaches once nothing changes: every volume that pods which count need on an
// existing managed node attached there (a CSI volume's VolumeAttachment attached
// and not being deleted) and listed in the node's status.volumesAttached, and no
// other VolumeAttachment (but copies another tool made of a needed one) or
// volumesAttached entry. A volume never force-detached (neverForce) whose
// VolumeAttachment is on a node that no longer exists is stuck there, and left
// out: nothing reports that it was unmounted.
func Converged(r fakeapi.Reader, neverForce func(volume string) bool) []string {
	var diffs []string
	want := map[string]simworld.NodeVolume{} // VolumeAttachment name → node and volume
	listed := map[string]map[string]bool{}   // node → volumes it must list
	wanted := simworld.Wanted(r)
	stuck := map[string]bool{}
	for _, va := range fakeapi.List[*storagev1.VolumeAttachment](r) {
		vol, _ := attachmentVolume(r, va)
		if _, exists := fakeapi.Get[*corev1.Node](r, "", va.Spec.NodeName); !exists && neverForce(vol) {
			stuck[vol] = true
		}
	}
	for nv, v := range wanted {
		node, ok := fakeapi.Get[*corev1.Node](r, "", nv.Node)
		if !ok || node.Annotations[sim.ControllerManagedAnnotation] != "true" || stuck[nv.Volume] {
			continue
		}
		if !v.ReportOnly() {
			want[sim.AttachmentName(v.Driver, v.Handle, nv.Node)] = nv
		}
		if listed[nv.Node] == nil {
			listed[nv.Node] = map[string]bool{}
		}
		listed[nv.Node][nv.Volume] = true
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		nv := want[name]
		va, ok := fakeapi.Get[*storagev1.VolumeAttachment](r, "", name)
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s needed on %s has no VolumeAttachment", nv.Volume, nv.Node))
		case va.DeletionTimestamp != nil:
			diffs = append(diffs, fmt.Sprintf("%s needed on %s: VolumeAttachment %s is being deleted", nv.Volume, nv.Node, name))
		case !va.Status.Attached:
			diffs = append(diffs, fmt.Sprintf("%s needed on %s: VolumeAttachment %s is not attached", nv.Volume, nv.Node, name))
		}
	}
	for _, va := range fakeapi.List[*storagev1.VolumeAttachment](r) {
		vol, _ := attachmentVolume(r, va)
		if _, needed := wanted[simworld.NodeVolume{Node: va.Spec.NodeName, Volume: vol}]; needed && simworld.IsCopy(va) {
			continue
		}
		if _, ok := want[va.Name]; !ok && !stuck[vol] {
			diffs = append(diffs, fmt.Sprintf("VolumeAttachment %s (node %s) remains though nothing needs it", va.Name, va.Spec.NodeName))
		}
	}
	for _, node := range fakeapi.List[*corev1.Node](r) {
		got := attachedVolumes(node)
		maps.DeleteFunc(got, func(v string, _ bool) bool { return stuck[v] })
		if !maps.Equal(got, listed[node.Name]) && (len(got) > 0 || len(listed[node.Name]) > 0) {
			diffs = append(diffs, fmt.Sprintf("node %s lists volumesAttached %v, want %v", node.Name, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(listed[node.Name]))))
		}
	}
	return diffs
}

// Describe summarizes the API's state for a report: nodes, pods and
// VolumeAttachments.
func Describe(r fakeapi.Reader) string {
	var b strings.Builder
	for _, node := range fakeapi.List[*corev1.Node](r) {
		fmt.Fprintf(&b, "node %s Ready=%v out-of-service=%v volumesInUse=%v volumesAttached=%v\n",
			node.Name, sim.Ready(node), simworld.OutOfService(node), node.Status.VolumesInUse, node.Status.VolumesAttached)
	}
	for _, pod := range fakeapi.List[*corev1.Pod](r) {
		var vols []string
		for _, v := range simworld.PodVolumes(r, pod) {
			vols = append(vols, cmp.Or(v.PV, v.Name))
		}
		fmt.Fprintf(&b, "pod %s/%s on %s phase=%s deleting=%v counts=%v volumes=%v\n",
			pod.Namespace, pod.Name, pod.Spec.NodeName, pod.Status.Phase, pod.DeletionTimestamp != nil, simworld.Counts(pod), vols)
	}
	for _, va := range fakeapi.List[*storagev1.VolumeAttachment](r) {
		pv := ""
		if va.Spec.Source.PersistentVolumeName != nil {
			pv = *va.Spec.Source.PersistentVolumeName
		}
		fmt.Fprintf(&b, "volumeattachment %s: %s on %s attached=%v deleting=%v\n", va.Name, pv, va.Spec.NodeName, va.Status.Attached, va.DeletionTimestamp != nil)
	}
	return b.String()
}
