// Package shadow compares the decisions the controller would make with what the
// cluster then shows, while another attach/detach controller (kube-controller-
// manager's) does the work: the controller runs beside it in shadow mode, writes
// nothing, and reports where the two agree and where they do not.
//
// A decision is held against node status, the one record every attach/detach
// controller keeps the same way: once the same decision about a volume on a node
// has stood for the grace period, the node's volumesAttached must list the
// volume if the decision keeps or attaches it there, and must not if it detaches
// it or waits before attaching it.
package shadow

import (
	"context"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
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

// Comparer holds decisions until their grace period is over, then compares.
type Comparer struct {
	grace  time.Duration
	nodes  corelisters.NodeLister
	result Result
	now    func() time.Time

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

// New returns a Comparer that reads node status from nodes and reports each
// comparison to result.
func New(grace time.Duration, nodes corelisters.NodeLister, result Result) *Comparer {
	return &Comparer{grace: grace, nodes: nodes, result: result, now: time.Now, pending: make(map[key]*pending)}
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
		c.pending[k] = &pending{decision: d, expected: expected, since: now}
	}
	for k := range c.pending {
		if k.volume == volume && !seen[k.node] {
			delete(c.pending, k)
		}
	}
}

// Run compares, every interval, the decisions whose grace period is over, until
// ctx ends.
func (c *Comparer) Run(ctx context.Context, interval time.Duration) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			c.CompareDue(ctx)
		}
	}
}

// CompareDue compares the decisions that have stood for the grace period and
// were not compared yet.
func (c *Comparer) CompareDue(ctx context.Context) {
	logger := klog.FromContext(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for k, p := range c.pending {
		if p.compared || now.Sub(p.since) < c.grace {
			continue
		}
		p.compared = true
		listed := c.listed(k)
		agreed := listed == (p.expected == ExpectAttached || p.expected == ExpectKeptMounted)
		c.result(p.expected, agreed)
		if !agreed {
			logger.Info("Shadow disagreement: the cluster does not show what this controller would have done",
				"volume", k.volume, "node", k.node, "expected", p.expected, "listedInNodeStatus", listed,
				"decidedFor", now.Sub(p.since).Round(time.Second), "explain", p.decision.Reason)
		}
	}
}

// listed tells whether the node's status lists the volume as attached.
func (c *Comparer) listed(k key) bool {
	node, err := c.nodes.Get(k.node)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(node.Status.VolumesAttached, func(av v1.AttachedVolume) bool { return av.Name == v1.UniqueVolumeName(k.volume) })
}
