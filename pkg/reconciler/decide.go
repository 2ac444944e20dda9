package reconciler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// UnmountPolicy says how long a volume still mounted on a node that no longer
// needs it stays attached before it is force-detached from a node that is not
// Ready.
type UnmountPolicy struct {
	// Default applies to volumes whose driver has no policy of its own.
	Default DriverUnmountPolicy
	// NeverForce turns force detach on timeout off for every volume, whatever
	// PerDriver says (--disable-force-detach-on-timeout).
	NeverForce bool
	// PerDriver holds the policies of CSI drivers, by driver name, and of the
	// in-tree iSCSI and Fibre Channel plugins, by plugin name.
	PerDriver map[string]DriverUnmountPolicy
}

// DriverUnmountPolicy is the unmount wait of one driver.
type DriverUnmountPolicy struct {
	MaxWait time.Duration
	// NeverForce keeps waiting for unmount forever.
	NeverForce bool
}

func (p DriverUnmountPolicy) String() string {
	if p.NeverForce {
		return "never"
	}
	return p.MaxWait.String()
}

// For returns the policy that applies to the volume, and the driver or plugin it
// is the policy of ("" for the default). The driver comes from the volume's name,
// so the policy applies to volumes no pod wants any more.
func (p UnmountPolicy) For(volume volumename.UniqueName) (DriverUnmountPolicy, string) {
	key := volumename.PluginLabel(volume)
	if driver, _, err := volumename.ParseUniqueName(volume); err == nil {
		key = driver
	}
	policy, ok := p.PerDriver[key]
	if !ok {
		policy, key = p.Default, ""
	}
	if p.NeverForce {
		policy.NeverForce = true
	}
	return policy, key
}

// Action is what the rules say must happen to a volume on a node.
type Action string

const (
	// ActionNone: the volume is where it must be.
	ActionNone Action = "none"
	// ActionWait: something must change before the volume can be attached or
	// detached.
	ActionWait Action = "wait"
	// ActionAttach: the volume is to be attached (or its attach runs).
	ActionAttach Action = "attach"
	// ActionDetach: the volume is to be detached (or its detach runs).
	ActionDetach Action = "detach"
)

// Decision is what the rules say about a volume on one node, and why, in words an
// operator reads.
type Decision struct {
	Node   string
	Action Action
	// Force names the rule that lets a detach go ahead while the node may still
	// have the volume mounted.
	Force cache.ForceRule
	// Reason says why, in plain words.
	Reason string
	// WaitStarted is when the wait for unmount began; ForceAt is when a force
	// detach becomes possible (zero: not on a timeout).
	WaitStarted, ForceAt time.Time
	// Policy is the unmount policy that applied and PolicyDriver the driver or
	// plugin it belongs to ("" for the default).
	Policy       DriverUnmountPolicy
	PolicyDriver string
	// HeldBy are the other nodes that hold a single-attach volume this node waits
	// for.
	HeldBy []string
	// Wanted tells whether a pod on the node needs the volume: the decision is
	// about attaching it there, not detaching it.
	Wanted bool
}

// Explain returns, sorted by node, what the rules say about the volume on every
// node that needs it or has something of it, without acting on it: what Sync
// would do now, and why. For the running controller (live), a wait for unmount
// that has not started yet counts from now, as the next Sync starts it; a
// snapshot of the cluster cannot know when a wait began, and says so.
func (r *Reconciler) Explain(name volumename.UniqueName, live bool) []Decision {
	if live {
		return r.decisions(name, waitsFromNow)
	}
	return r.decisions(name, waitsUnknown)
}

// unmountWaits says how decisions treat the waits for unmount.
type unmountWaits int

const (
	// waitsKept starts (and ends) waits as Sync does, so that the decisions of
	// successive calls follow them.
	waitsKept unmountWaits = iota
	// waitsFromNow reads the waits, and counts one not started yet from now.
	waitsFromNow
	// waitsUnknown reads the waits, and leaves the start of one not started
	// unknown (zero).
	waitsUnknown
)

// decisions returns the decisions about the volume on every node.
func (r *Reconciler) decisions(name volumename.UniqueName, waits unmountWaits) []Decision {
	desired, _ := r.cfg.Desired.Volume(name)
	attachments := r.cfg.Actual.Volume(name)
	now := r.cfg.Now()
	var out []Decision
	for _, on := range attachments {
		if _, wanted := desired.Nodes[on.Node]; wanted {
			if waits == waitsKept {
				r.cfg.Actual.EndUnmountWait(on.Volume, on.Node)
			}
			continue
		}
		out = append(out, r.decideDetach(on, r.cfg.Nodes.Get(on.Node), now, func() time.Time {
			switch waits {
			case waitsKept:
				return r.cfg.Actual.StartUnmountWait(on.Volume, on.Node, now)
			case waitsFromNow:
				return cmp.Or(on.UnmountWaitStarted, now)
			}
			return on.UnmountWaitStarted
		}))
	}
	for node := range desired.Nodes {
		var on *cache.OnNode
		if i := slices.IndexFunc(attachments, func(a cache.OnNode) bool { return a.Node == node }); i >= 0 {
			on = &attachments[i]
		}
		d := decideAttach(on, desired.Spec.AttachmentOn(node), r.cfg.Nodes.Get(node))
		d.Wanted = true
		if d.Action == ActionAttach && !desired.Spec.MultiAttach {
			if why := r.cfg.Actual.Incomplete(); why != "" && !volumename.ReportOnly(name) {
				d.Action, d.Reason = ActionWait, why
			} else if holders := r.cfg.Actual.Holders(name, desired.Spec.PVName, node); len(holders) > 0 {
				d.Action, d.HeldBy, d.Reason = ActionWait, holders, heldReason(desired, holders)
			}
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b Decision) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// heldReason words the wait of a single-attach volume that other nodes hold.
func heldReason(desired cache.DesiredVolume, holders []string) string {
	var parts []string
	for _, h := range holders {
		pods := desired.Nodes[h]
		if len(pods) == 0 {
			parts = append(parts, fmt.Sprintf("held by %s, where no pod needs it any more: waits for its detach", h))
			continue
		}
		parts = append(parts, fmt.Sprintf("held by %s for pod(s) %s: waits for them to go", h, strings.Join(podKeys(pods), ", ")))
	}
	return "a single-attach volume: " + strings.Join(parts, "; ")
}

// decideDetach applies the detach rules to an attachment on a node that no pod
// there needs. waitStarted returns when the wait for unmount began: the
// reconciler starts it, an explanation only reads it.
func (r *Reconciler) decideDetach(on cache.OnNode, node cache.Node, now time.Time, waitStarted func() time.Time) Decision {
	d := Decision{Node: on.Node, Action: ActionDetach}
	d.Policy, d.PolicyDriver = r.cfg.UnmountPolicy.For(on.Volume)
	switch {
	case node.Exists() && !node.Managed:
		d.Action, d.Reason = ActionNone, fmt.Sprintf("node %s is not managed by the attach/detach controller (no %s=true annotation): kubelet attaches and detaches there itself", on.Node, cache.ManagedAnnotation)
		return d
	case on.Deleting():
		d.Action, d.Reason = ActionWait, "its VolumeAttachment is being deleted: waiting for the CSI external-attacher to detach it"
		if msg := detachError(on); msg != "" {
			d.Reason += "; the CSI driver reported: " + msg
		}
		return d
	case !node.Mounted(on.Volume):
		d.Reason = fmt.Sprintf("no pod on %s needs it and kubelet does not report it in use", on.Node)
		return d
	case node.OutOfService:
		d.Force, d.Reason = cache.ForcedOutOfService, fmt.Sprintf("node %s has the %s taint: detached although it may still be mounted", on.Node, cache.OutOfServiceTaint)
		return d
	case r.cfg.DetachOnShutdownTaint && node.Shutdown && !node.Ready:
		d.Force, d.Reason = cache.ForcedOnShutdown, fmt.Sprintf("node %s has the %s taint and is not Ready: detached although it may still be mounted", on.Node, cache.ShutdownTaint)
		return d
	}
	d.WaitStarted = waitStarted()
	mounted := fmt.Sprintf("mounted on %s (volumesInUse); waiting for kubelet to unmount it since %s", on.Node, d.WaitStarted.Format(time.TimeOnly))
	if d.WaitStarted.IsZero() {
		mounted = fmt.Sprintf("mounted on %s (volumesInUse); waiting for kubelet to unmount it", on.Node)
	}
	if d.Policy.NeverForce {
		d.Action, d.Reason = ActionWait, mounted+"; force detach on timeout is off"+policyOf(d.PolicyDriver)
		return d
	}
	readiness := "Ready"
	if !node.Ready {
		readiness = "NotReady"
	}
	if d.WaitStarted.IsZero() {
		d.Action = ActionWait
		d.Reason = fmt.Sprintf("%s; %s is %s; force detach %s after the wait began if it is not Ready then%s (when the wait began is known only to the leader: --from-leader)",
			mounted, on.Node, readiness, d.Policy, policyOf(d.PolicyDriver))
		return d
	}
	d.ForceAt = d.WaitStarted.Add(d.Policy.MaxWait)
	if now.Before(d.ForceAt) {
		d.Action = ActionWait
		d.Reason = fmt.Sprintf("%s; %s is %s; force detach at %s if it is not Ready then, in %s%s", mounted, on.Node, readiness,
			d.ForceAt.Format(time.TimeOnly), d.ForceAt.Sub(now).Round(time.Second), policyOf(d.PolicyDriver))
		return d
	}
	if node.Ready {
		d.Action = ActionWait
		d.Reason = fmt.Sprintf("%s; the %s wait%s is over but %s is Ready, so it is not force-detached", mounted, d.Policy, policyOf(d.PolicyDriver), on.Node)
		return d
	}
	d.Force = cache.ForcedOnTimeout
	d.Reason = fmt.Sprintf("%s; the %s wait%s is over and %s is NotReady: force-detached", mounted, d.Policy, policyOf(d.PolicyDriver), on.Node)
	return d
}

func policyOf(driver string) string {
	if driver == "" {
		return ""
	}
	return " (policy of " + driver + ")"
}

// decideAttach applies the attach rules to a node whose pods need the volume; on
// is what exists of the volume there, if anything, and own names the object the
// controller attaches it with (cache.Volume.AttachmentOn): the one kubelet waits
// for, whatever copies of it other tools made. Whether another node holds a
// single-attach volume is the executor's to check, under the volume's lock.
func decideAttach(on *cache.OnNode, own string, node cache.Node) Decision {
	d := Decision{Node: node.Name, Action: ActionAttach, Reason: "to be attached"}
	var mine *cache.Attachment
	if on != nil {
		if i := slices.IndexFunc(on.Objects, func(a cache.Attachment) bool { return a.VolumeAttachment == own }); i >= 0 {
			mine = &on.Objects[i]
		}
	}
	switch {
	case mine != nil && (mine.Deleting || mine.DeleteUnsettled):
		d.Action, d.Reason = ActionWait, "its previous VolumeAttachment on this node is being deleted: waiting for the CSI external-attacher to detach it first"
	case mine != nil && mine.Attached:
		d.Action, d.Reason = ActionNone, "attached"
	case !node.Exists():
		d.Action, d.Reason = ActionWait, fmt.Sprintf("node %s does not exist", node.Name)
	case !node.Managed:
		d.Action, d.Reason = ActionWait, fmt.Sprintf("node %s is not managed by the attach/detach controller (no %s=true annotation): kubelet attaches there itself", node.Name, cache.ManagedAnnotation)
	case mine != nil && mine.AttachError != "":
		d.Reason = "attaching; the CSI driver reported: " + mine.AttachError
	case mine != nil:
		d.Reason = "attaching: waiting for the CSI external-attacher"
	}
	return d
}

func detachError(on cache.OnNode) string {
	for _, a := range on.Objects {
		if a.DetachError != "" {
			return a.DetachError
		}
	}
	return ""
}
