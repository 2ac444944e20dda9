// Package shadow compares the decisions the controller would make with what the
// cluster then shows, while another attach/detach controller (kube-controller-
// manager's) does the work: the controller runs beside it in shadow mode, writes
// nothing, and reports where the two agree and where they do not.
//
// A decision is held against node status, the one record every attach/detach
// controller keeps the same way: once the same decision about a volume on a node
// has stood for the grace period, the node's volumesAttached must list the
// volume if the decision keeps or attaches it there, and must not if it detaches
// it or waits before attaching it. A decision the cluster already agrees with
// when it is replaced (the other controller acted, and the decision changed with
// it) counts as an agreement; one replaced before its grace period and not met
// counts as nothing.
package shadow

import (
	"context"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/reconciler"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// Expectation is what node status should show after the grace period, given a
// decision; it names the agreement and disagreement metrics.
type Expectation string

const (
	// ExpectAttached: the volume is wanted and attached, or to be attached.
	ExpectAttached Expectation = "attached"
	// ExpectKeptMounted: the volume is no longer wanted but kubelet still has it
	// mounted, and no force rule applies yet: it stays.
	ExpectKeptMounted Expectation = "kept-while-mounted"
	// ExpectDetached: the volume is to be detached.
	ExpectDetached Expectation = "detached"
	// ExpectNotAttached: the volume is wanted but must wait (held by another
	// node, node not managed...).
	ExpectNotAttached Expectation = "not-attached-while-waiting"
)

// Expectations are every Expectation, for the metrics to export from the start.
var Expectations = []Expectation{ExpectAttached, ExpectKeptMounted, ExpectDetached, ExpectNotAttached}

// expectationOf tells what node status should show after a decision, and whether
// the decision says anything about it.
func expectationOf(d reconciler.Decision) (Expectation, bool) {
	switch {
	case d.Wanted && (d.Action == reconciler.ActionAttach || d.Action == reconciler.ActionNone):
		return ExpectAttached, true
	case d.Wanted && d.Action == reconciler.ActionWait:
		return ExpectNotAttached, true
	case !d.Wanted && d.Action == reconciler.ActionDetach:
		return ExpectDetached, true
	case !d.Wanted && d.Action == reconciler.ActionWait && !d.WaitStarted.IsZero():
		return ExpectKeptMounted, true
	}
	return "", false
}

// Result counts one comparison.
type Result func(expected Expectation, agreed bool)

// Explainer tells, in explain's words, what the controller knows and decides
// about a volume now.
type Explainer func(volumename.UniqueName) string

// Comparer holds decisions until their grace period is over, then compares.
type Comparer struct {
	grace   time.Duration
	nodes   corelisters.NodeLister
	result  Result
	explain Explainer
	now     func() time.Time
	logger  klog.Logger

	mu      sync.Mutex
	pending map[key]*pending
}

type key struct {
	volume volumename.UniqueName
	node   string
}

type pending struct {
	decision reconciler.Decision
	expected Expectation
	since    time.Time
	// compared is set once the decision has been compared: it is counted once,
	// however long it stands.
	compared bool
}

// New returns a Comparer that reads node status from nodes, reports each
// comparison to result and logs each disagreement with logger, with explain's
// text about the volume.
func New(logger klog.Logger, grace time.Duration, nodes corelisters.NodeLister, result Result, explain Explainer) *Comparer {
	return &Comparer{grace: grace, nodes: nodes, result: result, explain: explain, now: time.Now, logger: logger, pending: make(map[key]*pending)}
}

// Observe records the decisions made now about the volume, one per node, in
// place of the ones made before.
func (c *Comparer) Observe(volume volumename.UniqueName, decisions []reconciler.Decision) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	seen := make(map[string]bool, len(decisions))
	for _, d := range decisions {
		expected, ok := expectationOf(d)
		if !ok {
			continue
		}
		seen[d.Node] = true
		k := key{volume, d.Node}
		if p, ok := c.pending[k]; ok && p.expected == expected {
			p.decision = d
			continue
		}
		c.settleEarly(k)
		c.pending[k] = &pending{decision: d, expected: expected, since: now}
		c.logger.V(4).Info("Shadow decision", "volume", volume, "node", d.Node, "expected", expected, "reason", d.Reason())
	}
	for k := range c.pending {
		if k.volume == volume && !seen[k.node] {
			c.settleEarly(k)
			delete(c.pending, k)
		}
	}
}

// settleEarly counts, as it is replaced, a decision the cluster already agrees
// with before its grace period is over: the other controller did what this one
// would have done. One it does not agree with yet is dropped uncounted, since it
// did not stand for the grace period.
func (c *Comparer) settleEarly(k key) {
	p, ok := c.pending[k]
	if !ok || p.compared {
		return
	}
	if c.listed(k) == listedWhen(p.expected) {
		p.compared = true
		c.result(p.expected, true)
	}
}

// listedWhen tells whether node status should list the volume when the
// expectation is met.
func listedWhen(e Expectation) bool { return e == ExpectAttached || e == ExpectKeptMounted }

// Run compares, every interval, the decisions whose grace period is over, until
// ctx ends.
func (c *Comparer) Run(ctx context.Context, interval time.Duration) {
	wait.UntilWithContext(ctx, func(context.Context) { c.CompareDue() }, interval)
}

// CompareDue compares the decisions that have stood for the grace period and
// were not compared yet, and logs each disagreement.
func (c *Comparer) CompareDue() {
	for _, d := range c.compareDue() {
		c.logger.Info("Shadow disagreement: the cluster does not show what this controller would have done",
			"volume", d.key.volume, "node", d.key.node, "expected", d.expected, "listedInNodeStatus", d.listed,
			"decidedFor", d.decidedFor.Round(time.Second), "reason", d.reason, "explain", c.explain(d.key.volume))
	}
}

// disagreement is a compared decision the cluster does not agree with.
type disagreement struct {
	key        key
	expected   Expectation
	listed     bool
	decidedFor time.Duration
	reason     string
}

// compareDue counts the comparisons due and returns the disagreements, to be
// explained once the lock is released: explaining reads the reconciler's state,
// whose workers call Observe.
func (c *Comparer) compareDue() []disagreement {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	var out []disagreement
	for k, p := range c.pending {
		if p.compared || now.Sub(p.since) < c.grace {
			continue
		}
		p.compared = true
		listed := c.listed(k)
		agreed := listed == listedWhen(p.expected)
		c.result(p.expected, agreed)
		if !agreed {
			out = append(out, disagreement{key: k, expected: p.expected, listed: listed, decidedFor: now.Sub(p.since), reason: p.decision.Reason()})
		}
	}
	return out
}

// listed tells whether the node's status lists the volume as attached.
func (c *Comparer) listed(k key) bool {
	node, err := c.nodes.Get(k.node)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(node.Status.VolumesAttached, func(av v1.AttachedVolume) bool { return av.Name == v1.UniqueVolumeName(k.volume) })
}
