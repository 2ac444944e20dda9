// Package explain holds the answer to "why is this volume (not) attached?": what
// an explanation is about, the report the controller's own rules make of it
// (Explainer, reading the controller's state through a Source), and its
// rendering as text for a person, or as JSON or YAML for tools.
package explain

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Target names what to explain: a pod, claim, PV, node or VolumeAttachment.
type Target struct {
	Kind      Kind   `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// Kind is the kind of object explained.
type Kind string

// The kinds an explanation can be about.
const (
	Pod              Kind = "pod"
	Claim            Kind = "pvc"
	PV               Kind = "pv"
	Node             Kind = "node"
	VolumeAttachment Kind = "volumeattachment"
)

var kindNames = map[string]Kind{
	"pod": Pod, "pods": Pod, "po": Pod,
	"pvc": Claim, "pvcs": Claim, "persistentvolumeclaim": Claim, "persistentvolumeclaims": Claim,
	"pv": PV, "pvs": PV, "persistentvolume": PV, "persistentvolumes": PV,
	"node": Node, "nodes": Node, "no": Node,
	"volumeattachment": VolumeAttachment, "volumeattachments": VolumeAttachment, "va": VolumeAttachment,
}

// Kinds are the kinds an explanation can be about, in the order help lists them.
var Kinds = []Kind{Pod, Claim, PV, Node, VolumeAttachment}

// ParseKind reads a kind as kubectl spells it: singular, plural or short name.
func ParseKind(s string) (Kind, bool) {
	k, known := kindNames[strings.ToLower(s)]
	return k, known
}

// Namespaced tells whether objects of the kind live in a namespace.
func (k Kind) Namespaced() bool {
	return k == Pod || k == Claim
}

// ParseTarget reads KIND/NAME, as kubectl spells it; namespace applies to pods
// and claims. NAME must be a name the API server allows for the kind (a DNS-1123
// subdomain for all five), and a namespace given a DNS-1123 label, so that what
// no object can be named is refused here rather than looked up and echoed back.
func ParseTarget(s, namespace string) (Target, error) {
	kind, name, ok := strings.Cut(s, "/")
	k, known := ParseKind(kind)
	if !ok || !known || name == "" || strings.Contains(name, "/") {
		return Target{}, fmt.Errorf("%q is not one of pod/NAME, pvc/NAME, pv/NAME, node/NAME, volumeattachment/NAME", s)
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return Target{}, fmt.Errorf("%q: %q is not a valid %s name: %s", s, name, k, strings.Join(msgs, "; "))
	}
	t := Target{Kind: k, Name: name}
	if k.Namespaced() {
		if msgs := validation.IsDNS1123Label(namespace); namespace != "" && len(msgs) > 0 {
			return Target{}, fmt.Errorf("%q is not a valid namespace: %s", namespace, strings.Join(msgs, "; "))
		}
		t.Namespace = namespace
	}
	return t, nil
}

func (t Target) String() string {
	if t.Namespace != "" {
		return fmt.Sprintf("%s/%s -n %s", t.Kind, t.Name, t.Namespace)
	}
	return fmt.Sprintf("%s/%s", t.Kind, t.Name)
}

// Report is the explanation of a target.
type Report struct {
	Target Target `json:"target"`
	// At is when the state explained was read.
	At time.Time `json:"at"`
	// Source says where the state came from: "snapshot" (read by the command
	// with the caller's credentials) or "leader" (the running leader's memory).
	Source string `json:"source"`
	// DetachPolicy is the detach policy the rules applied, as the controller's
	// flags: the leader's own, or those given to a snapshot.
	DetachPolicy string `json:"detachPolicy"`
	// Problems are the target's volumes that cannot be attached, and why.
	Problems []Problem `json:"problems,omitempty"`
	Volumes  []Volume  `json:"volumes,omitempty"`
}

// Problem is a volume of a pod (or a claim) that is not attachable now.
type Problem struct {
	// Pod is namespace/name of the pod whose volume it is, if any.
	Pod string `json:"pod,omitempty"`
	// Volume is the volume's name in the pod, or the claim's name.
	Volume string `json:"volume"`
	Reason string `json:"reason"`
}

// Volume is everything about one attachable volume.
type Volume struct {
	// Name is the unique volume name kubelet uses; Display the PV's name or the
	// pod's volume name (the translated PV's for a migrated inline volume).
	Name    string `json:"name"`
	Display string `json:"display,omitempty"`
	PV      string `json:"pv,omitempty"`
	// MultiAttach tells whether several nodes may have it at once.
	MultiAttach bool         `json:"multiAttach"`
	Nodes       []NodeReport `json:"nodes"`
}

// NodeReport is the volume on one node: who needs it, what exists, what the rules say.
type NodeReport struct {
	Node string `json:"node"`
	// Pods are namespace/name of the pods on the node that need the volume.
	Pods        []string     `json:"pods,omitempty"`
	Attachments []Attachment `json:"attachments,omitempty"`
	// NodeStatus tells how the node's status lists the volume.
	ListedAttached bool `json:"listedAttached"`
	ListedInUse    bool `json:"listedInUse"`
	// Action is what the rules say must happen: none, wait, attach or detach.
	Action string `json:"action"`
	Reason string `json:"reason"`
	// ForceAt is when a force detach becomes possible, if a wait for unmount
	// runs; Policy the unmount wait that applies and whose it is.
	ForceAt *time.Time `json:"forceAt,omitempty"`
	Policy  string     `json:"policy,omitempty"`
	// Running and Backoff come from the leader only: an operation in progress, or
	// the time left before the next one after a failure.
	Running bool   `json:"running,omitempty"`
	Backoff string `json:"backoff,omitempty"`
}

// Attachment is one VolumeAttachment of the volume on the node, or, for an
// in-tree iSCSI or Fibre Channel volume, its report in node status.
type Attachment struct {
	// Name is empty for a report-only attachment.
	Name        string `json:"name,omitempty"`
	Attached    bool   `json:"attached"`
	Deleting    bool   `json:"deleting,omitempty"`
	AttachError string `json:"attachError,omitempty"`
	DetachError string `json:"detachError,omitempty"`
}

// WriteText writes the report for a person.
func WriteText(w io.Writer, r Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s, as the %s saw it at %s\n", r.Target, r.Source, r.At.Format(time.TimeOnly))
	fmt.Fprintf(&b, "detach policy: %s\n", r.DetachPolicy)
	for _, p := range r.Problems {
		who := p.Volume
		if p.Pod != "" {
			who = fmt.Sprintf("pod %s, volume %s", p.Pod, p.Volume)
		}
		fmt.Fprintf(&b, "  %s: %s\n", who, p.Reason)
	}
	if len(r.Problems) == 0 && len(r.Volumes) == 0 {
		b.WriteString("  no attachable volume\n")
	}
	for _, v := range r.Volumes {
		b.WriteString("\n")
		writeVolume(&b, v)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// VolumeText is the part of a report's text about one volume.
func VolumeText(v Volume) string {
	var b strings.Builder
	writeVolume(&b, v)
	return b.String()
}

func writeVolume(b *strings.Builder, v Volume) {
	nodes := "one node at a time"
	if v.MultiAttach {
		nodes = "several nodes at once"
	}
	fmt.Fprintf(b, "volume %s (%s), %s\n", cmp.Or(v.Display, v.Name), v.Name, nodes)
	for _, n := range v.Nodes {
		needed := "no pod needs it"
		if len(n.Pods) > 0 {
			needed = "needed by " + strings.Join(n.Pods, ", ")
		}
		fmt.Fprintf(b, "  %s: %s\n", n.Node, needed)
		for _, a := range n.Attachments {
			fmt.Fprintf(b, "    %s\n", describeAttachment(a))
		}
		fmt.Fprintf(b, "    node status: %s\n", describeStatus(n))
		fmt.Fprintf(b, "    %s: %s\n", actionLabels[n.Action], n.Reason)
		if n.Running {
			b.WriteString("    an operation is running\n")
		}
		if n.Backoff != "" {
			fmt.Fprintf(b, "    %s\n", n.Backoff)
		}
	}
}

// actionLabels head the line that says what must happen.
var actionLabels = map[string]string{"none": "ok", "wait": "waiting", "attach": "attaching", "detach": "detaching"}

func describeAttachment(a Attachment) string {
	s := "VolumeAttachment " + a.Name
	if a.Name == "" {
		s = "reported attached in node status (in-tree volume, no VolumeAttachment)"
	}
	switch {
	case a.Deleting:
		s += ": being deleted"
	case a.Attached:
		s += ": attached"
	default:
		s += ": not attached yet"
	}
	if a.AttachError != "" {
		s += "; attachError: " + a.AttachError
	}
	if a.DetachError != "" {
		s += "; detachError: " + a.DetachError
	}
	return s
}

func describeStatus(n NodeReport) string {
	var parts []string
	if n.ListedAttached {
		parts = append(parts, "in volumesAttached")
	} else {
		parts = append(parts, "not in volumesAttached")
	}
	if n.ListedInUse {
		parts = append(parts, "in volumesInUse")
	} else {
		parts = append(parts, "not in volumesInUse")
	}
	return strings.Join(parts, ", ")
}
