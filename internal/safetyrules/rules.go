package safetyrules

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Rule names a safety rule in its violations.
type Rule string

const (
	// SingleAttachRule is rules 1 and 3.
	SingleAttachRule Rule = "single-attach"
	// MountedDetachRule is rule 2.
	MountedDetachRule Rule = "mounted-detach"
)

// Violation is one breach of a rule.
type Violation struct {
	Rule Rule
	// What words the breach and its facts; When says when or by whom, as far as
	// the checker knows.
	What, When string
}

func (v Violation) String() string {
	return fmt.Sprintf("INVARIANT %s: %s (%s)", v.Rule, v.What, v.When)
}

// Volume is what the rules know of a volume.
type Volume struct {
	// Ref names it in violations: "PV <name>", or "inline <unique name>".
	Ref string
	// Name is the unique name node status and kubelet know it by.
	Name         string
	SingleAttach bool
}

// Attachment is a VolumeAttachment, in any state.
type Attachment struct {
	Name, Node string
	Volume     Volume
}

// SingleAttached judges rule 1 over VolumeAttachments: one violation for each
// single-attach volume they put on more than one node.
func SingleAttached(attachments []Attachment, when string) []Violation {
	byVolume := map[string]map[string][]string{} // volume ref → node → attachment names
	for _, a := range attachments {
		if !a.Volume.SingleAttach {
			continue
		}
		if byVolume[a.Volume.Ref] == nil {
			byVolume[a.Volume.Ref] = map[string][]string{}
		}
		byVolume[a.Volume.Ref][a.Node] = append(byVolume[a.Volume.Ref][a.Node], a.Name)
	}
	var out []Violation
	for _, ref := range slices.Sorted(maps.Keys(byVolume)) {
		names := byVolume[ref]
		if len(names) < 2 {
			continue
		}
		nodes := slices.Sorted(maps.Keys(names))
		var all []string
		for _, n := range nodes {
			all = append(all, slices.Sorted(slices.Values(names[n]))...)
		}
		out = append(out, Violation{Rule: SingleAttachRule, When: when,
			What: fmt.Sprintf("single-attach volume %s has VolumeAttachments on nodes %s: %s", ref, strings.Join(nodes, ", "), strings.Join(all, ", "))})
	}
	return out
}

// Detach is a detach rule 2 judges: a VolumeAttachment's deletion (requested or
// done), or an iSCSI or Fibre Channel volume leaving a node's volumesAttached.
type Detach struct {
	// Node and Volume (by unique name) are what was detached.
	Node, Volume string
	// Attachment names the VolumeAttachment; empty for a volumesAttached entry.
	Attachment string
	When       string
}

// Detached judges rule 2 on a detach.
func (s *Snapshot) Detached(d Detach) (Violation, bool) {
	if !s.Mounted(d.Node, d.Volume) || s.ForceDetachAllowed(d.Node, d.Volume) {
		return Violation{}, false
	}
	what := fmt.Sprintf("volume %s left the volumesAttached of node %s", d.Volume, d.Node)
	if d.Attachment != "" {
		what = fmt.Sprintf("VolumeAttachment %s (volume %s on node %s) was deleted", d.Attachment, d.Volume, d.Node)
	}
	return Violation{Rule: MountedDetachRule, When: d.When,
		What: fmt.Sprintf("%s while kubelet there has it mounted; node %s", what, s.describe(d.Node, d.Volume))}, true
}

// ListingBegan judges rule 3 when a node's volumesAttached begins to list v, a
// single-attach iSCSI or Fibre Channel volume: one violation for each other
// node whose kubelet may have it mounted.
func (s *Snapshot) ListingBegan(v Volume, node, when string) []Violation {
	var out []Violation
	for _, other := range slices.Sorted(maps.Keys(s.Nodes)) {
		if other != node && s.mayHaveMounted(other, v.Name) && !s.released(other, v.Name) && !s.ForceDetachAllowed(other, v.Name) && !s.recordLost(other, v.Name) {
			out = append(out, Violation{Rule: SingleAttachRule, When: when,
				What: fmt.Sprintf("single-attach volume %s (%s) listed in the volumesAttached of node %s while kubelet on %s may have it mounted; node %s %s",
					v.Name, v.Ref, node, other, other, s.describe(other, v.Name))})
		}
	}
	return out
}

// ReleasedByForce returns the other nodes whose kubelet may have v mounted and
// whose claim a listing of v on node gives up, as rule 2's force conditions hold
// there: a forced detach, which the checker records (ForceReleased).
func (s *Snapshot) ReleasedByForce(v Volume, node string) []string {
	var out []string
	for _, other := range slices.Sorted(maps.Keys(s.Nodes)) {
		if other != node && s.mayHaveMounted(other, v.Name) && !s.released(other, v.Name) && s.ForceDetachAllowed(other, v.Name) {
			out = append(out, other)
		}
	}
	return out
}

// MountChanceBegan judges rule 3 when kubelet on a node may begin to mount v, a
// single-attach iSCSI or Fibre Channel volume: one violation for each other node
// whose volumesAttached lists it (listers).
func (s *Snapshot) MountChanceBegan(v Volume, node string, listers []string, when string) []Violation {
	if s.ForceDetachAllowed(node, v.Name) {
		return nil
	}
	var out []Violation
	for _, other := range slices.Sorted(slices.Values(listers)) {
		if other != node {
			out = append(out, Violation{Rule: SingleAttachRule, When: when,
				What: fmt.Sprintf("kubelet on %s may mount single-attach volume %s (%s) while node %s lists it in volumesAttached too", node, v.Name, v.Ref, other)})
		}
	}
	return out
}
