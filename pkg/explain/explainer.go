package explain

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/populator"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/reconciler"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// Source is what an explanation reads of the controller: the objects its
// informers hold, its state, its rules and, for the leader, its operations. It
// decides nothing itself: every action and reason comes from Rules.
type Source struct {
	Listers  Listers
	Desired  DesiredState
	Actual   ActualState
	Nodes    NodeRegister
	Resolver VolumeResolver
	Rules    Rules
	// Operations is read for the leader only (live).
	Operations Operations
}

// Listers are the informers' objects an explanation reads.
type Listers struct {
	Pods        corelisters.PodLister
	Claims      corelisters.PersistentVolumeClaimLister
	PVs         corelisters.PersistentVolumeLister
	Nodes       corelisters.NodeLister
	Attachments storagelisters.VolumeAttachmentLister
}

// DesiredState is what an explanation reads of the desired state
// (cache.DesiredState).
type DesiredState interface {
	Volume(name volumename.UniqueName) (cache.DesiredVolume, bool)
	VolumesOnNode(node string) []volumename.UniqueName
}

// ActualState is what an explanation reads of the actual state
// (cache.ActualState).
type ActualState interface {
	Volume(name volumename.UniqueName) []cache.OnNode
	VolumesOnNode(node string) []volumename.UniqueName
	Object(name string) (cache.Attachment, bool)
}

// NodeRegister is the controller's record of nodes (cache.Nodes).
type NodeRegister interface {
	Get(name string) cache.Node
}

// VolumeResolver finds the volumes of pods and PVs as the desired state is built
// (populator.Populator).
type VolumeResolver interface {
	Resolve(logger klog.Logger, pod *v1.Pod) []populator.Resolution
	VolumeOfPV(pv *v1.PersistentVolume) (cache.Volume, bool, error)
	DriverNeedsNoAttach(vol cache.Volume) string
}

// Rules are the reconciler's decisions about a volume, made without acting on
// them, and the detach policy they apply (reconciler.Reconciler).
type Rules interface {
	Explain(name volumename.UniqueName, live bool) []reconciler.Decision
	DetachPolicy() (policy reconciler.UnmountPolicy, detachOnShutdownTaint bool)
}

// Operations is what only the running controller knows: the operations in
// progress and the backoff after a failure (operationexecutor.Executor).
type Operations interface {
	IsRunning(volume volumename.UniqueName, node string) bool
	Backoff(volume volumename.UniqueName, node string) (time.Duration, string)
}

// Explainer makes reports from the controller's state.
type Explainer struct {
	src Source
}

// New returns an Explainer that reads src.
func New(src Source) *Explainer {
	return &Explainer{src: src}
}

// Explain answers for the target with the controller's own rules applied to its
// state now. live adds what only the running controller knows: the operations in
// progress and the backoff after a failure.
func (e *Explainer) Explain(ctx context.Context, t Target, live bool) (Report, error) {
	r := Report{Target: t, At: time.Now(), Source: "snapshot", DetachPolicy: e.detachPolicy()}
	if live {
		r.Source = "leader"
	}
	volumes, err := e.targetVolumes(ctx, t, &r)
	if err != nil {
		return r, err
	}
	for _, name := range volumes {
		r.Volumes = append(r.Volumes, e.Volume(name, live))
	}
	return r, nil
}

// targetVolumes returns the attachable volumes the target involves, and records
// in r the ones that cannot be attached and why.
func (e *Explainer) targetVolumes(ctx context.Context, t Target, r *Report) ([]volumename.UniqueName, error) {
	var out []volumename.UniqueName
	add := func(name volumename.UniqueName) {
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	problem := func(pod, volume, reason string) {
		r.Problems = append(r.Problems, Problem{Pod: pod, Volume: volume, Reason: reason})
	}
	switch t.Kind {
	case Pod:
		pod, err := e.src.Listers.Pods.Pods(t.Namespace).Get(t.Name)
		if err != nil {
			return nil, notFound(err, t)
		}
		key := pod.Namespace + "/" + pod.Name
		switch {
		case pod.Spec.NodeName == "":
			problem(key, "", "the pod is not scheduled to a node yet: no node needs its volumes")
		case !populator.NeedsVolumes(pod):
			problem(key, "", "the pod has terminated: its volumes are no longer needed")
		}
		for _, res := range e.src.Resolver.Resolve(klog.FromContext(ctx), pod) {
			switch {
			case res.Err != nil:
				problem(key, res.PodVolume, res.Err.Error())
			case res.NotAttachedBecause != "":
				problem(key, res.PodVolume, "needs no attaching: "+res.NotAttachedBecause)
			case res.Attachable:
				add(res.Volume.Name)
			}
		}
	case Claim:
		claim, err := e.src.Listers.Claims.PersistentVolumeClaims(t.Namespace).Get(t.Name)
		if err != nil {
			return nil, notFound(err, t)
		}
		if claim.Status.Phase != v1.ClaimBound || claim.Spec.VolumeName == "" {
			problem("", claim.Name, "the claim is not bound")
			return nil, nil
		}
		return e.pvVolumes(claim.Spec.VolumeName, problem), nil
	case PV:
		if _, err := e.src.Listers.PVs.Get(t.Name); err != nil {
			return nil, notFound(err, t)
		}
		return e.pvVolumes(t.Name, problem), nil
	case Node:
		for _, v := range e.src.Desired.VolumesOnNode(t.Name) {
			add(v)
		}
		for _, v := range e.src.Actual.VolumesOnNode(t.Name) {
			add(v)
		}
		if len(out) == 0 && !e.src.Nodes.Get(t.Name).Exists() {
			return nil, fmt.Errorf("node %s not found", t.Name)
		}
	case VolumeAttachment:
		if att, ok := e.src.Actual.Object(t.Name); ok {
			add(att.Volume)
			break
		}
		va, err := e.src.Listers.Attachments.Get(t.Name)
		if err != nil {
			return nil, notFound(err, t)
		}
		pv := ""
		if va.Spec.Source.PersistentVolumeName != nil {
			pv = *va.Spec.Source.PersistentVolumeName
		}
		problem("", t.Name, fmt.Sprintf("its volume cannot be identified (PersistentVolume %q not found); it still holds that PV on node %s", pv, va.Spec.NodeName))
	}
	slices.Sort(out)
	return out, nil
}

// pvVolumes returns the attachable volume of a PV, or records why there is none.
func (e *Explainer) pvVolumes(pvName string, problem func(pod, volume, reason string)) []volumename.UniqueName {
	pv, err := e.src.Listers.PVs.Get(pvName)
	if err != nil {
		problem("", pvName, fmt.Sprintf("PersistentVolume %s: %v", pvName, err))
		return nil
	}
	vol, ok, err := e.src.Resolver.VolumeOfPV(pv)
	switch {
	case err != nil:
		problem("", pvName, err.Error())
		return nil
	case !ok:
		problem("", pvName, "not an attachable volume (no CSI, translatable in-tree, iSCSI or Fibre Channel source)")
		return nil
	}
	if res := e.src.Resolver.DriverNeedsNoAttach(vol); res != "" {
		problem("", pvName, "needs no attaching: "+res)
	}
	return []volumename.UniqueName{vol.Name}
}

// pvOfAttachments names the PV a volume's VolumeAttachments were made for: where no
// pod needs the volume any more, they are what is left to name it by.
func (e *Explainer) pvOfAttachments(attachments []cache.OnNode) string {
	for _, on := range attachments {
		for _, a := range on.Objects {
			if a.VolumeAttachment == "" {
				continue
			}
			if va, err := e.src.Listers.Attachments.Get(a.VolumeAttachment); err == nil && va.Spec.Source.PersistentVolumeName != nil {
				return *va.Spec.Source.PersistentVolumeName
			}
		}
	}
	return ""
}

// detachPolicy says, in the controller's flags, when a volume still mounted is
// detached anyway.
func (e *Explainer) detachPolicy() string {
	p, detachOnShutdownTaint := e.src.Rules.DetachPolicy()
	parts := []string{"--max-wait-for-unmount=" + p.Default.MaxWait.String()}
	if len(p.PerDriver) > 0 {
		var drivers []string
		for _, driver := range slices.Sorted(maps.Keys(p.PerDriver)) {
			drivers = append(drivers, driver+"="+p.PerDriver[driver].String())
		}
		parts = append(parts, "--max-wait-for-unmount-per-driver="+strings.Join(drivers, ","))
	}
	if p.NeverForce {
		parts = append(parts, "--disable-force-detach-on-timeout")
	}
	if detachOnShutdownTaint {
		parts = append(parts, "--detach-on-shutdown-taint")
	}
	return strings.Join(parts, " ")
}

func notFound(err error, t Target) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%s not found", t)
	}
	return fmt.Errorf("reading %s: %w", t, err)
}

// Volume reports the volume on every node that needs it or has something of it.
func (e *Explainer) Volume(name volumename.UniqueName, live bool) Volume {
	desired, _ := e.src.Desired.Volume(name)
	out := Volume{Name: string(name), Display: desired.Spec.DisplayName, PV: desired.Spec.PVName, MultiAttach: desired.Spec.MultiAttach}
	attachments := e.src.Actual.Volume(name)
	if len(desired.Nodes) == 0 && len(attachments) > 0 {
		out.MultiAttach = attachments[0].MultiAttach()
	}
	if out.PV == "" {
		out.PV = e.pvOfAttachments(attachments)
		out.Display = cmp.Or(out.Display, out.PV)
	}
	for _, d := range e.src.Rules.Explain(name, live) {
		n := NodeReport{Node: d.Node, Action: string(d.Action), Reason: d.Reason()}
		for _, p := range desired.Nodes[d.Node] {
			n.Pods = append(n.Pods, p.Key())
		}
		if i := slices.IndexFunc(attachments, func(on cache.OnNode) bool { return on.Node == d.Node }); i >= 0 {
			for _, a := range attachments[i].Objects {
				n.Attachments = append(n.Attachments, Attachment{
					Name: a.VolumeAttachment, Attached: a.Attached, Deleting: a.Deleting || a.DeleteUnsettled,
					AttachError: a.AttachError, DetachError: a.DetachError,
				})
			}
		}
		if node, err := e.src.Listers.Nodes.Get(d.Node); err == nil {
			n.ListedAttached = slices.ContainsFunc(node.Status.VolumesAttached, func(av v1.AttachedVolume) bool { return av.Name == v1.UniqueVolumeName(name) })
			n.ListedInUse = slices.Contains(node.Status.VolumesInUse, v1.UniqueVolumeName(name))
		}
		if !d.ForceAt.IsZero() {
			n.ForceAt = &d.ForceAt
		}
		if d.Action == reconciler.ActionDetach || !d.WaitStarted.IsZero() {
			n.Policy = d.Policy.String()
			if d.PolicyDriver != "" {
				n.Policy += " (" + d.PolicyDriver + ")"
			}
		}
		if live {
			n.Running = e.src.Operations.IsRunning(name, d.Node)
			if left, kind := e.src.Operations.Backoff(name, d.Node); left > 0 {
				n.Backoff = fmt.Sprintf("the last %s failed: the next may start in %s", kind, left.Round(time.Second))
			}
		}
		out.Nodes = append(out.Nodes, n)
	}
	return out
}
