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
package simcheck

import (
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

// Checker is a fakeapi Observer.
type Checker struct {
	maxWait, grace time.Duration
	mounts         *simworld.Mounts
	report         func(string)

	mu         sync.Mutex
	violations []string
	wanted     map[simworld.NodeVolume]bool
	// unwantedSince is when a volume stopped being needed on a node; a volume
	// never needed there is absent.
	unwantedSince map[simworld.NodeVolume]time.Time
	health        map[string]*nodeHealth
}

// nodeHealth is when a node's force-detach conditions began and ended.
type nodeHealth struct {
	unhealthy, outOfService bool
	// healthyAt is when it last became Ready again (zero: never), taintRemovedAt
	// when it last lost the out-of-service taint.
	unhealthySince, healthyAt, taintRemovedAt time.Time
}

// New returns a checker; report is told of each violation as it happens.
func New(maxWait, grace time.Duration, mounts *simworld.Mounts, report func(string)) *Checker {
	return &Checker{
		maxWait: maxWait, grace: grace, mounts: mounts, report: report,
		wanted: map[simworld.NodeVolume]bool{}, unwantedSince: map[simworld.NodeVolume]time.Time{}, health: map[string]*nodeHealth{},
	}
}

// Violations returns the violations seen so far.
func (c *Checker) Violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.violations)
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
	h.unhealthy, h.outOfService = unhealthy, oos
}

// forceAllowed tells whether rule 2 lets the volume be detached from the node
// while mounted.
func (c *Checker) forceAllowed(node, volume string, now time.Time) bool {
	h, ok := c.health[node]
	if !ok {
		return false
	}
	if h.outOfService || (!h.taintRemovedAt.IsZero() && now.Sub(h.taintRemovedAt) <= c.grace) {
		return true
	}
	if c.wanted[simworld.NodeVolume{Node: node, Volume: volume}] {
		return false
	}
	// The last instant the node was unhealthy, if within the grace.
	last := now
	if !h.unhealthy {
		if h.healthyAt.IsZero() || now.Sub(h.healthyAt) > c.grace {
			return false
		}
		last = h.healthyAt
	}
	return last.Sub(c.unwantedSince[simworld.NodeVolume{Node: node, Volume: volume}]) >= c.maxWait-c.grace
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
	return v.UniqueName(), ok
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

// Converged returns what keeps the API from the state a correct controller
// reaches once nothing changes: every volume that pods which count need on an
// existing managed node attached there (its VolumeAttachment attached and not
// being deleted) and listed in the node's status.volumesAttached, and no other
// VolumeAttachment or volumesAttached entry.
func Converged(r fakeapi.Reader) []string {
	var diffs []string
	want := map[string]simworld.NodeVolume{} // VolumeAttachment name → node and volume
	listed := map[string]map[string]bool{}   // node → volumes it must list
	for nv, v := range simworld.Wanted(r) {
		node, ok := fakeapi.Get[*corev1.Node](r, "", nv.Node)
		if !ok || node.Annotations[sim.ControllerManagedAnnotation] != "true" {
			continue
		}
		want[sim.AttachmentName(v.Driver, v.Handle, nv.Node)] = nv
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
		if _, ok := want[va.Name]; !ok {
			diffs = append(diffs, fmt.Sprintf("VolumeAttachment %s (node %s) remains though nothing needs it", va.Name, va.Spec.NodeName))
		}
	}
	for _, node := range fakeapi.List[*corev1.Node](r) {
		got := map[string]bool{}
		for _, av := range node.Status.VolumesAttached {
			got[string(av.Name)] = true
		}
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
			vols = append(vols, v.PV)
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
