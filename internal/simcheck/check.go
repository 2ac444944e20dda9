// Package simcheck feeds the safety rules (internal/safetyrules) after every
// write a fakeapi store applies, with the API's state at that instant and what
// the simulated kubelets have mounted, and checks convergence at the end.
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
	"github.com/attachdetach-controller/attachdetach-controller/internal/safetyrules"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
	"github.com/attachdetach-controller/attachdetach-controller/internal/simworld"
)

// Checker is a fakeapi Observer.
type Checker struct {
	report func(string)

	mu         sync.Mutex
	violations []string
	// snap is kept up to date with every write; its Now is the last write's.
	snap safetyrules.Snapshot
}

// New returns a checker; report is told of each violation as it happens.
func New(settings safetyrules.Settings, mounts *sim.Mounts, report func(string)) *Checker {
	return &Checker{report: report, snap: safetyrules.Snapshot{
		Settings: settings,
		Nodes:    map[string]*safetyrules.NodeHealth{},
		Needed:   map[safetyrules.NodeVolume]bool{}, UnneededSince: map[safetyrules.NodeVolume]time.Time{},
		NeededSince: map[safetyrules.NodeVolume]time.Time{},
		Mounted:     mounts.Mounted,
		MayMount:    map[safetyrules.NodeVolume]bool{}, LastListed: map[safetyrules.NodeVolume]time.Time{}, LastRemoved: map[safetyrules.NodeVolume]time.Time{},
		ForceReleased: map[safetyrules.NodeVolume]time.Time{},
	}}
}

// ControllerReady tells the checker that a controller incarnation, which lists
// what exists as it starts, is ready now.
func (c *Checker) ControllerReady() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.snap.ControllerReady = time.Now()
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
	c.violate(fmt.Sprintf(format, args...))
}

func (c *Checker) violate(msg string) {
	c.violations = append(c.violations, msg)
	c.report(msg)
}

func (c *Checker) violateAll(vs ...safetyrules.Violation) {
	for _, v := range vs {
		c.violate(v.String())
	}
}

// Observe is the store's observer.
func (c *Checker) Observe(r fakeapi.Reader, w fakeapi.Write) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.snap.Now = time.Now()
	switch w.Ref.Resource {
	case fakeapi.Pods, fakeapi.PVCs, fakeapi.PVs, fakeapi.CSIDrivers:
		c.updateNeeded(r)
	case fakeapi.Nodes:
		c.updateHealth(w.Ref.Name, w.New)
		c.checkNodeStatus(r, w)
	case fakeapi.VolumeAttachments:
		c.checkDeletion(r, w)
		c.checkSingleAttach(r, w)
	}
}

func (c *Checker) updateNeeded(r fakeapi.Reader) {
	needed := map[safetyrules.NodeVolume]bool{}
	for nv := range simworld.Wanted(r) {
		needed[nv] = true
		if !c.snap.Needed[nv] {
			c.snap.NeededSince[nv] = c.snap.Now
		}
	}
	for nv := range c.snap.Needed {
		if !needed[nv] {
			c.snap.UnneededSince[nv] = c.snap.Now
		}
	}
	c.snap.Needed = needed
}

func (c *Checker) updateHealth(name string, obj any) {
	now := c.snap.Now
	h, ok := c.snap.Nodes[name]
	if !ok {
		h = &safetyrules.NodeHealth{}
		c.snap.Nodes[name] = h
	}
	node, _ := obj.(*corev1.Node)
	if node == nil {
		h.Deletions = append(h.Deletions, now)
	}
	unhealthy := node == nil || !sim.Ready(node)
	// A node deleted while out of service stays shut down.
	oos := h.OutOfService
	if node != nil {
		oos = simworld.OutOfService(node)
	}
	if !unhealthy && h.Unhealthy {
		h.HealthyAt = now
	}
	if unhealthy && !h.Unhealthy {
		h.UnhealthyAt = now
	}
	if !oos && h.OutOfService {
		h.TaintRemovedAt = now
	}
	shutdown := h.Shutdown
	if node != nil {
		shutdown = unhealthy && simworld.ShutdownTainted(node)
	}
	if !shutdown && h.Shutdown {
		h.ShutdownEndedAt = now
	}
	h.Deleted, h.Unhealthy, h.OutOfService, h.Shutdown = node == nil, unhealthy, oos, shutdown
}

// checkDeletion judges rule 2 on a VolumeAttachment's deletion.
func (c *Checker) checkDeletion(r fakeapi.Reader, w fakeapi.Write) {
	old, _ := w.Old.(*storagev1.VolumeAttachment)
	if old == nil || old.DeletionTimestamp != nil {
		return
	}
	if va, _ := w.New.(*storagev1.VolumeAttachment); va != nil && va.DeletionTimestamp == nil {
		return
	}
	vol, ok := attachmentVolume(r, old)
	if !ok {
		return
	}
	if v, broken := c.snap.Detached(safetyrules.Detach{Node: old.Spec.NodeName, Volume: vol.Name, Attachment: old.Name, When: by(w)}); broken {
		c.violateAll(v)
	}
}

// by words who made a write.
func by(w fakeapi.Write) string { return "by " + w.Actor }

// attachmentVolume returns a VolumeAttachment's volume.
func attachmentVolume(r fakeapi.Reader, va *storagev1.VolumeAttachment) (safetyrules.Volume, bool) {
	if va.Spec.Source.PersistentVolumeName == nil {
		return safetyrules.Volume{}, false
	}
	return pvVolume(r, *va.Spec.Source.PersistentVolumeName)
}

// pvVolume returns what the rules know of a PV's volume, if it exists and needs
// attaching.
func pvVolume(r fakeapi.Reader, pv string) (safetyrules.Volume, bool) {
	v, ok := simworld.PVVolume(r, pv)
	return safetyrules.Volume{Ref: "PV " + pv, Name: v.Name, SingleAttach: v.SingleAttach}, ok
}

// checkSingleAttach judges rule 1 over every VolumeAttachment.
func (c *Checker) checkSingleAttach(r fakeapi.Reader, w fakeapi.Write) {
	var attachments []safetyrules.Attachment
	for _, va := range fakeapi.List[*storagev1.VolumeAttachment](r) {
		if v, ok := attachmentVolume(r, va); ok {
			attachments = append(attachments, safetyrules.Attachment{Name: va.Name, Node: va.Spec.NodeName, Volume: v})
		}
	}
	c.violateAll(safetyrules.SingleAttached(attachments, by(w))...)
}

// checkNodeStatus judges rules 2 and 3 on a write of a node, for the iSCSI and
// Fibre Channel volumes its status attaches.
func (c *Checker) checkNodeStatus(r fakeapi.Reader, w fakeapi.Write) {
	name, now := w.Ref.Name, c.snap.Now
	old, _ := w.Old.(*corev1.Node)
	node, _ := w.New.(*corev1.Node)
	wasListed, listed := attachedVolumes(old), attachedVolumes(node)
	if node != nil {
		for _, v := range slices.Sorted(maps.Keys(wasListed)) {
			if listed[v] {
				continue
			}
			c.snap.LastRemoved[safetyrules.NodeVolume{Node: name, Volume: v}] = now
			if !simworld.ReportOnlyName(v) {
				continue
			}
			if viol, broken := c.snap.Detached(safetyrules.Detach{Node: name, Volume: v, When: by(w)}); broken {
				c.violateAll(viol)
			}
		}
	}
	for v := range listed {
		c.snap.LastListed[safetyrules.NodeVolume{Node: name, Volume: v}] = now
	}
	began := c.updateMayMount(name, node, listed)
	single := singleAttachReportOnly(r)
	for _, v := range slices.Sorted(maps.Keys(single)) {
		if listed[v] && !wasListed[v] {
			c.violateAll(c.snap.ListingBegan(single[v], name, by(w))...)
			for _, other := range c.snap.ReleasedByForce(single[v], name) {
				c.snap.ForceReleased[safetyrules.NodeVolume{Node: other, Volume: v}] = now
			}
		}
		if !began[v] {
			continue
		}
		var listers []string
		for _, n := range fakeapi.List[*corev1.Node](r) {
			if attachedVolumes(n)[v] {
				listers = append(listers, n.Name)
			}
		}
		c.violateAll(c.snap.MountChanceBegan(single[v], name, listers, "since the write "+by(w))...)
	}
}

// updateMayMount brings the node's MayMount entries up to date with the node as
// written (nil: deleted) and returns the volumes its kubelet may now mount that
// it could not before.
func (c *Checker) updateMayMount(name string, node *corev1.Node, listed map[string]bool) map[string]bool {
	inUse := map[string]bool{}
	if node != nil {
		for _, v := range node.Status.VolumesInUse {
			inUse[string(v)] = true
		}
	}
	for nv := range c.snap.MayMount {
		if nv.Node == name && !inUse[nv.Volume] {
			delete(c.snap.MayMount, nv)
		}
	}
	began := map[string]bool{}
	for v := range inUse {
		nv := safetyrules.NodeVolume{Node: name, Volume: v}
		if listed[v] && !c.snap.MayMount[nv] {
			c.snap.MayMount[nv] = true
			began[v] = true
		}
	}
	return began
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

// singleAttachReportOnly returns the single-attach iSCSI and Fibre Channel
// volumes, by unique name.
func singleAttachReportOnly(r fakeapi.Reader) map[string]safetyrules.Volume {
	out := map[string]safetyrules.Volume{}
	for _, pv := range fakeapi.List[*corev1.PersistentVolume](r) {
		if v, ok := simworld.PVVolume(r, pv.Name); ok && v.ReportOnly() && v.SingleAttach {
			out[v.Name] = safetyrules.Volume{Ref: "PV " + pv.Name, Name: v.Name, SingleAttach: true}
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
	want := map[string]safetyrules.NodeVolume{} // VolumeAttachment name → node and volume
	listed := map[string]map[string]bool{}      // node → volumes it must list
	wanted := simworld.Wanted(r)
	stuck := map[string]bool{}
	for _, va := range fakeapi.List[*storagev1.VolumeAttachment](r) {
		v, _ := attachmentVolume(r, va)
		vol := v.Name
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
		v, _ := attachmentVolume(r, va)
		vol := v.Name
		if _, needed := wanted[safetyrules.NodeVolume{Node: va.Spec.NodeName, Volume: vol}]; needed && simworld.IsCopy(va) {
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
