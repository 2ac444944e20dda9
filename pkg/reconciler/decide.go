package reconciler

import (
	"cmp"
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

// Decision is what the rules say about a volume on one node: the rule that
// decided (Code) and the facts it decided on. Reason words it for an operator.
type Decision struct {
	Node   string
	Action Action
	// Code names the rule that decided.
	Code ReasonCode
	// Force names the rule that lets a detach go ahead while the node may still
	// have the volume mounted.
	Force cache.ForceRule
	// At is when the rules were applied.
	At time.Time
	// WaitStarted is when the wait for unmount began; ForceAt is when a force
	// detach becomes possible (zero: not on a timeout).
	WaitStarted, ForceAt time.Time
	// Policy is the unmount policy that applied and PolicyDriver the driver or
	// plugin it belongs to ("" for the default).
	Policy       DriverUnmountPolicy
	PolicyDriver string
	// NodeReady tells whether the node was Ready.
	NodeReady bool
	// HeldBy are the other nodes that hold a single-attach volume this node waits
	// for, and HolderPods the pods on each of them that still need it.
	HeldBy     []string
	HolderPods map[string][]string
	// DriverError is what the CSI driver reported on the VolumeAttachment.
	DriverError string
	// Unproven says why the actual state may lack a VolumeAttachment that holds
	// the volume elsewhere.
	Unproven string
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
	return r.decide(name, desired, r.cfg.Actual.Volume(name), waits)
}

// decide applies the rules to the volume as desired and as attached, on every
// node that needs it or has something of it, sorted by node.
func (r *Reconciler) decide(name volumename.UniqueName, desired cache.DesiredVolume, attachments []cache.OnNode, waits unmountWaits) []Decision {
	now := r.cfg.Now()
	var neededUntil map[string]time.Time
	if waits == waitsKept {
		neededUntil = r.cfg.Desired.TakeNeededUntil(name)
	} else {
		neededUntil = r.cfg.Desired.NeededUntil(name)
	}
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
				return r.cfg.Actual.StartUnmountWait(on.Volume, on.Node, now, neededUntil[on.Node])
			case waitsFromNow:
				return later(cmp.Or(on.UnmountWaitStarted, now), neededUntil[on.Node])
			}
			if on.UnmountWaitStarted.IsZero() {
				return on.UnmountWaitStarted
			}
			return later(on.UnmountWaitStarted, neededUntil[on.Node])
		}))
	}
	for node := range desired.Nodes {
		d := decideAttach(attachmentOn(attachments, node), desired.Spec.AttachmentOn(node), r.cfg.Nodes.Get(node))
		d.Wanted, d.At = true, now
		if d.Action == ActionAttach && !desired.Spec.MultiAttach {
			if why := r.cfg.Actual.Incomplete(); why != "" && !volumename.ReportOnly(desired.Spec.Name) {
				d.Action, d.Code, d.Unproven = ActionWait, ReasonHoldersUnknown, why
			} else if holders := r.cfg.Actual.Holders(desired.Spec.Name, desired.Spec.PVName, node); len(holders) > 0 {
				d.Action, d.Code, d.HeldBy, d.HolderPods = ActionWait, ReasonHeld, holders, holderPods(desired, holders)
			}
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b Decision) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// attachmentOn returns what exists of the volume on the node, if anything.
func attachmentOn(attachments []cache.OnNode, node string) *cache.OnNode {
	if i := slices.IndexFunc(attachments, func(a cache.OnNode) bool { return a.Node == node }); i >= 0 {
		return &attachments[i]
	}
	return nil
}

// holderPods returns, by holder, the pods there that still need the volume.
func holderPods(desired cache.DesiredVolume, holders []string) map[string][]string {
	out := make(map[string][]string, len(holders))
	for _, h := range holders {
		out[h] = podKeys(desired.Nodes[h])
	}
	return out
}

// decideDetach applies the detach rules to an attachment on a node that no pod
// there needs. waitStarted returns when the wait for unmount began: the
// reconciler starts it, an explanation only reads it.
func (r *Reconciler) decideDetach(on cache.OnNode, node cache.Node, now time.Time, waitStarted func() time.Time) Decision {
	d := Decision{Node: on.Node, Action: ActionDetach, At: now, NodeReady: node.Ready}
	d.Policy, d.PolicyDriver = r.cfg.UnmountPolicy.For(on.Volume)
	switch {
	case node.Exists() && !node.Managed:
		d.Action, d.Code = ActionNone, ReasonKubeletDetaches
		return d
	case on.Deleting():
		d.Action, d.Code, d.DriverError = ActionWait, ReasonDetaching, detachError(on)
		return d
	case !node.Mounted(on.Volume):
		d.Code = ReasonNotInUse
		return d
	case node.OutOfService:
		d.Force, d.Code = cache.ForcedOutOfService, ReasonOutOfService
		return d
	case r.cfg.DetachOnShutdownTaint && node.Shutdown && !node.Ready:
		d.Force, d.Code = cache.ForcedOnShutdown, ReasonShutdown
		return d
	}
	d.WaitStarted = waitStarted()
	if d.Policy.NeverForce {
		d.Action, d.Code = ActionWait, ReasonMountedNeverForced
		return d
	}
	if d.WaitStarted.IsZero() {
		d.Action, d.Code = ActionWait, ReasonMountedSinceUnknown
		return d
	}
	seenSince, watching := r.podsWatchingSince()
	if !watching {
		d.Action, d.Code = ActionWait, ReasonPodsNotWatched
		return d
	}
	d.ForceAt = later(d.WaitStarted, seenSince).Add(d.Policy.MaxWait)
	if now.Before(d.ForceAt) {
		d.Action, d.Code = ActionWait, ReasonMounted
		return d
	}
	if node.Ready {
		d.Action, d.Code = ActionWait, ReasonMountedOnReadyNode
		return d
	}
	d.Force, d.Code = cache.ForcedOnTimeout, ReasonMountedTimedOut
	return d
}

// decideAttach applies the attach rules to a node whose pods need the volume; on
// is what exists of the volume there, if anything, and own names the object the
// controller attaches it with (cache.Volume.AttachmentOn): the one kubelet waits
// for, whatever copies of it other tools made. Whether another node holds a
// single-attach volume is for decide to add, and for the executor to check again
// under the volume's lock.
func decideAttach(on *cache.OnNode, own string, node cache.Node) Decision {
	d := Decision{Node: node.Name, Action: ActionAttach, Code: ReasonToAttach, NodeReady: node.Ready}
	var mine *cache.Attachment
	if on != nil {
		if i := slices.IndexFunc(on.Objects, func(a cache.Attachment) bool { return a.VolumeAttachment == own }); i >= 0 {
			mine = &on.Objects[i]
		}
	}
	switch {
	case mine != nil && (mine.Deleting || mine.DeleteUnsettled):
		d.Action, d.Code = ActionWait, ReasonPreviousDetaching
	case mine != nil && mine.Attached:
		d.Action, d.Code = ActionNone, ReasonAttached
	case !node.Exists():
		d.Action, d.Code = ActionWait, ReasonNodeMissing
	case !node.Managed:
		d.Action, d.Code = ActionWait, ReasonKubeletAttaches
	case mine != nil && mine.AttachError != "":
		d.Code, d.DriverError = ReasonAttachFailing, mine.AttachError
	case mine != nil:
		d.Code = ReasonAttaching
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

// podsWatchingSince tells whether the pod informer shows what happens, and since
// when: a wait for unmount counts no earlier, since pods it did not show may have
// needed the volume.
func (r *Reconciler) podsWatchingSince() (time.Time, bool) {
	if r.cfg.Pods == nil {
		return time.Time{}, true
	}
	return r.cfg.Pods.WatchingSince()
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
