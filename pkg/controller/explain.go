package controller

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
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/explain"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/populator"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/reconciler"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// Snapshot fills the state from the informers as the start-up rebuild does, and
// starts nothing else: no operation, no write. It lets a command explain the
// cluster as it is, read with its caller's credentials.
func (c *Controller) Snapshot(ctx context.Context) error {
	c.factory.Start(ctx.Done())
	for typ, ok := range c.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer for %v did not sync", typ)
		}
	}
	return c.rebuild(ctx)
}

// Explain answers for the target with the controller's own rules applied to its
// state now. live adds what only the running controller knows: the operations in
// progress and the backoff after a failure.
func (c *Controller) Explain(ctx context.Context, t explain.Target, live bool) (explain.Report, error) {
	r := explain.Report{Target: t, At: time.Now(), Source: "snapshot", DetachPolicy: c.opts.describeDetachPolicy()}
	if live {
		r.Source = "leader"
	}
	volumes, err := c.targetVolumes(ctx, t, &r)
	if err != nil {
		return r, err
	}
	for _, name := range volumes {
		r.Volumes = append(r.Volumes, c.explainVolume(name, live))
	}
	return r, nil
}

// targetVolumes returns the attachable volumes the target involves, and records
// in r the ones that cannot be attached and why.
func (c *Controller) targetVolumes(ctx context.Context, t explain.Target, r *explain.Report) ([]volumename.UniqueName, error) {
	var out []volumename.UniqueName
	add := func(name volumename.UniqueName) {
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	problem := func(pod, volume, reason string) {
		r.Problems = append(r.Problems, explain.Problem{Pod: pod, Volume: volume, Reason: reason})
	}
	switch t.Kind {
	case explain.Pod:
		pod, err := c.informers.pods.Lister().Pods(t.Namespace).Get(t.Name)
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
		for _, res := range c.populator.Resolve(klog.FromContext(ctx), pod) {
			switch {
			case res.Err != nil:
				problem(key, res.PodVolume, res.Err.Error())
			case res.NotAttachedBecause != "":
				problem(key, res.PodVolume, "needs no attaching: "+res.NotAttachedBecause)
			case res.Attachable:
				add(res.Volume.Name)
			}
		}
	case explain.Claim:
		claim, err := c.informers.claims.Lister().PersistentVolumeClaims(t.Namespace).Get(t.Name)
		if err != nil {
			return nil, notFound(err, t)
		}
		if claim.Status.Phase != v1.ClaimBound || claim.Spec.VolumeName == "" {
			problem("", claim.Name, "the claim is not bound")
			return nil, nil
		}
		return c.pvVolumes(claim.Spec.VolumeName, problem), nil
	case explain.PV:
		if _, err := c.informers.pvs.Lister().Get(t.Name); err != nil {
			return nil, notFound(err, t)
		}
		return c.pvVolumes(t.Name, problem), nil
	case explain.Node:
		for _, v := range c.desired.VolumesOnNode(t.Name) {
			add(v)
		}
		for _, v := range c.actual.VolumesOnNode(t.Name) {
			add(v)
		}
		if len(out) == 0 && !c.nodes.Get(t.Name).Exists() {
			return nil, fmt.Errorf("node %s not found", t.Name)
		}
	case explain.VolumeAttachment:
		if att, ok := c.actual.Object(t.Name); ok {
			add(att.Volume)
			break
		}
		va, err := c.informers.attachments.Lister().Get(t.Name)
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
func (c *Controller) pvVolumes(pvName string, problem func(pod, volume, reason string)) []volumename.UniqueName {
	pv, err := c.informers.pvs.Lister().Get(pvName)
	if err != nil {
		problem("", pvName, fmt.Sprintf("PersistentVolume %s: %v", pvName, err))
		return nil
	}
	vol, ok, err := c.populator.VolumeOfPV(pv)
	switch {
	case err != nil:
		problem("", pvName, err.Error())
		return nil
	case !ok:
		problem("", pvName, "not an attachable volume (no CSI, translatable in-tree, iSCSI or Fibre Channel source)")
		return nil
	}
	if res := c.populator.DriverNeedsNoAttach(vol); res != "" {
		problem("", pvName, "needs no attaching: "+res)
	}
	return []volumename.UniqueName{vol.Name}
}

// pvOfAttachments names the PV a volume's VolumeAttachments were made for: where no
// pod needs the volume any more, they are what is left to name it by.
func (c *Controller) pvOfAttachments(attachments []cache.OnNode) string {
	for _, on := range attachments {
		for _, a := range on.Objects {
			if a.VolumeAttachment == "" {
				continue
			}
			if va, err := c.informers.attachments.Lister().Get(a.VolumeAttachment); err == nil && va.Spec.Source.PersistentVolumeName != nil {
				return *va.Spec.Source.PersistentVolumeName
			}
		}
	}
	return ""
}

// describeDetachPolicy says, in the flags' words, when a volume still mounted is
// detached anyway.
func (o Options) describeDetachPolicy() string {
	parts := []string{"--max-wait-for-unmount=" + o.MaxWaitForUnmount.String()}
	if len(o.MaxWaitForUnmountPerDriver) > 0 {
		var drivers []string
		for _, driver := range slices.Sorted(maps.Keys(o.MaxWaitForUnmountPerDriver)) {
			drivers = append(drivers, driver+"="+o.MaxWaitForUnmountPerDriver[driver].String())
		}
		parts = append(parts, "--max-wait-for-unmount-per-driver="+strings.Join(drivers, ","))
	}
	if o.DisableForceDetachOnTimeout {
		parts = append(parts, "--disable-force-detach-on-timeout")
	}
	if o.DetachOnShutdownTaint {
		parts = append(parts, "--detach-on-shutdown-taint")
	}
	return strings.Join(parts, " ")
}

func notFound(err error, t explain.Target) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%s not found", t)
	}
	return fmt.Errorf("reading %s: %w", t, err)
}

// explainVolume reports the volume on every node that needs it or has something of it.
func (c *Controller) explainVolume(name volumename.UniqueName, live bool) explain.Volume {
	desired, _ := c.desired.Volume(name)
	out := explain.Volume{Name: string(name), Display: desired.Spec.DisplayName, PV: desired.Spec.PVName, MultiAttach: desired.Spec.MultiAttach}
	attachments := c.actual.Volume(name)
	if len(desired.Nodes) == 0 && len(attachments) > 0 {
		out.MultiAttach = attachments[0].MultiAttach()
	}
	if out.PV == "" {
		out.PV = c.pvOfAttachments(attachments)
		out.Display = cmp.Or(out.Display, out.PV)
	}
	for _, d := range c.reconciler.Explain(name, live) {
		n := explain.NodeReport{Node: d.Node, Action: string(d.Action), Reason: d.Reason()}
		for _, p := range desired.Nodes[d.Node] {
			n.Pods = append(n.Pods, p.Key())
		}
		if i := slices.IndexFunc(attachments, func(on cache.OnNode) bool { return on.Node == d.Node }); i >= 0 {
			for _, a := range attachments[i].Objects {
				n.Attachments = append(n.Attachments, explain.Attachment{
					Name: a.VolumeAttachment, Attached: a.Attached, Deleting: a.Deleting || a.DeleteUnsettled,
					AttachError: a.AttachError, DetachError: a.DetachError,
				})
			}
		}
		if node, err := c.informers.nodes.Lister().Get(d.Node); err == nil {
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
			n.Running = c.executor.IsRunning(name, d.Node)
			if left, kind := c.executor.Backoff(name, d.Node); left > 0 {
				n.Backoff = fmt.Sprintf("the last %s failed: the next may start in %s", kind, left.Round(time.Second))
			}
		}
		out.Nodes = append(out.Nodes, n)
	}
	return out
}
