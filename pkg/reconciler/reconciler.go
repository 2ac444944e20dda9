// Package reconciler decides, one volume at a time, what must happen to it: first
// the detaches from nodes that no longer need it (waiting for unmount, honouring
// node health and the out-of-service taint), then the attaches to nodes that need
// it, refusing a second node for a single-attach volume and telling the pods why.
// Volumes come from a work queue fed by informer events, so a change is acted on at
// once; a periodic pass re-queues everything as a safety net.
package reconciler

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/keyworkers"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/operationexecutor"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/podevents"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// Executor starts attach and detach operations.
type Executor interface {
	// Attach starts attaching; it refuses with a *operationexecutor.HeldError
	// when another node holds a single-attach volume, and with a
	// *operationexecutor.HoldersUnknownError when that is not known.
	Attach(ctx context.Context, vol cache.Volume, node string, pods []cache.PodRef) error
	Detach(ctx context.Context, on cache.OnNode, force cache.ForceRule) error
	IsRunning(volume volumename.UniqueName, node string) bool
	// AttachObserved tells the executor that the volume is attached to the node,
	// so that an attach that had failed (timed out, attachError) and then
	// succeeded on the driver's side is reported as a success.
	AttachObserved(vol cache.Volume, node string, pods []cache.PodRef)
}

// Config holds the reconciler's state sources, executor and settings.
type Config struct {
	Desired  *cache.DesiredState
	Actual   *cache.ActualState
	Nodes    *cache.Nodes
	Executor Executor
	// NodeStatus is asked to write a node's status when a volume is to be listed
	// there again.
	NodeStatus interface{ Enqueue(node string) }
	Events     *podevents.Emitter
	Metrics    *metrics.Metrics
	// UnmountPolicy says how long a volume still mounted on a node that no longer
	// needs it is left attached before a force detach is considered.
	UnmountPolicy UnmountPolicy
	// DetachOnShutdownTaint lets a node that is not Ready and carries the cloud
	// provider's shutdown taint lose its volumes at once, as if out of service.
	DetachOnShutdownTaint bool
	// Pods tells whether the pod informer shows what happens, and since when it
	// may have missed nothing (nil: always, since ever).
	Pods PodView
	Now  func() time.Time
}

// PodView tells whether the pod informer shows what happens: false from a failure
// of its watch until it watches again. since is its last list: pods that came and
// went before it were never shown.
type PodView interface {
	WatchingSince() (since time.Time, watching bool)
}

// Reconciler reconciles volumes taken from its work queue.
type Reconciler struct {
	cfg   Config
	queue workqueue.TypedDelayingInterface[volumename.UniqueName]
	// held collects what is enqueued between Hold and Release; nil otherwise.
	// holding is set while it does, so that Enqueue takes no lock otherwise.
	holding atomic.Bool
	heldMu  sync.Mutex
	held    map[volumename.UniqueName]struct{}
}

// New returns a Reconciler.
func New(cfg Config) *Reconciler {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Reconciler{
		cfg: cfg,
		// Sync cannot fail: it only asks for the volume to come back later.
		queue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[volumename.UniqueName]{Name: "volumes"}),
	}
}

// DetachPolicy returns the wait for unmount the rules apply, and whether they
// treat a shut-down node's taint as out of service.
func (r *Reconciler) DetachPolicy() (UnmountPolicy, bool) {
	return r.cfg.UnmountPolicy, r.cfg.DetachOnShutdownTaint
}

// Enqueue asks for the volume to be reconciled.
func (r *Reconciler) Enqueue(name volumename.UniqueName) {
	if !r.holding.Load() {
		r.queue.Add(name)
		return
	}
	r.heldMu.Lock()
	if r.held != nil {
		r.held[name] = struct{}{}
		r.heldMu.Unlock()
		return
	}
	r.heldMu.Unlock()
	r.queue.Add(name)
}

// Hold collects the volumes enqueued from now on until Release. At start-up every
// volume is enqueued, and most need nothing; Release puts the few that need an
// attach or a detach first, so that a pod waiting for its volume does not wait
// for a look at every other volume.
func (r *Reconciler) Hold() {
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	if r.held == nil {
		r.held = make(map[volumename.UniqueName]struct{})
	}
	r.holding.Store(true)
}

// Release queues the volumes collected since Hold: first those that may need an
// attach or a detach, then the others; later ones are queued at once again.
func (r *Reconciler) Release() {
	r.heldMu.Lock()
	held := r.held
	r.held = nil
	r.holding.Store(false)
	r.heldMu.Unlock()
	var later []volumename.UniqueName
	for name := range held {
		if r.mayAct(name) {
			r.queue.Add(name)
		} else {
			later = append(later, name)
		}
	}
	for _, name := range later {
		r.queue.Add(name)
	}
}

// mayAct tells whether the volume may need an attach or a detach: a node needs it
// and has no VolumeAttachment for it, or a node has one and does not need it.
// Only the order of the first reconciles rests on it.
func (r *Reconciler) mayAct(name volumename.UniqueName) bool {
	needed := r.cfg.Desired.NodesOf(name)
	recorded := r.cfg.Actual.NodesWithObjects(name)
	return len(needed) != len(recorded) || slices.ContainsFunc(recorded, func(node string) bool { return !slices.Contains(needed, node) })
}

// QueueLength returns how many volumes wait to be reconciled.
func (r *Reconciler) QueueLength() int { return r.queue.Len() }

// ShutDown stops the queue, whether or not Run ran.
func (r *Reconciler) ShutDown() { r.queue.ShutDown() }

// Run reconciles queued volumes with the given number of workers until ctx ends.
func (r *Reconciler) Run(ctx context.Context, workers int) {
	keyworkers.RunDelaying(ctx, r.queue, workers, "volume", r.Sync)
}

// RunShadow decides for queued volumes as Run does, and hands the decisions to
// observe instead of acting on them, until ctx ends.
func (r *Reconciler) RunShadow(ctx context.Context, workers int, observe func(volumename.UniqueName, []Decision)) {
	keyworkers.RunDelaying(ctx, r.queue, workers, "volume", func(_ context.Context, name volumename.UniqueName) time.Duration {
		decisions := r.decisions(name, waitsKept)
		observe(name, decisions)
		return forceDue(decisions).after
	})
}

// Sync reconciles one volume across all nodes and returns when it should be looked
// at again (0: when something changes). It acts on the decisions Explain reads:
// the detaches first, then the attaches, each in decide's order of nodes.
func (r *Reconciler) Sync(ctx context.Context, name volumename.UniqueName) time.Duration {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "volume", name)
	ctx = klog.NewContext(ctx, logger)
	desired, _ := r.cfg.Desired.Volume(name)
	attachments := r.cfg.Actual.Volume(name)
	decisions := r.decide(name, desired, attachments, waitsKept)
	next := forceDue(decisions)
	for _, wanted := range []bool{false, true} {
		for _, d := range decisions {
			if d.Wanted == wanted && !r.act(ctx, desired, attachmentOn(attachments, d.Node), d, &next) {
				return next.after
			}
		}
	}
	return next.after
}

// requeue keeps the earliest time the volume must be looked at again.
type requeue struct{ after time.Duration }

func (q *requeue) at(d time.Duration) {
	if d > 0 && (q.after == 0 || d < q.after) {
		q.after = d
	}
}

// forceDue returns when the first wait for unmount among the decisions ends.
func forceDue(decisions []Decision) requeue {
	var next requeue
	for _, d := range decisions {
		if d.At.Before(d.ForceAt) {
			next.at(d.ForceAt.Sub(d.At))
		}
	}
	return next
}

// act carries out one decision about the volume on the node, where on is what
// exists of the volume, if anything. It returns false once an attach of a
// single-attach volume has started: no other node may start one beside it.
func (r *Reconciler) act(ctx context.Context, desired cache.DesiredVolume, on *cache.OnNode, d Decision, next *requeue) bool {
	logger := klog.FromContext(ctx)
	switch {
	case !d.Wanted && d.Action == ActionWait:
		logger.V(4).Info("Not detaching yet", "node", d.Node, "reason", d.Reason())
	case !d.Wanted && d.Action == ActionDetach:
		if d.Force != cache.NotForced {
			logger.Info("Detaching a volume the node may still have mounted", "node", d.Node, "force", d.Force,
				"reason", d.Reason(), "maxWaitForUnmount", d.Policy, "policyOf", cmp.Or(d.PolicyDriver, "default"))
		}
		r.handleStartError(ctx, r.cfg.Executor.Detach(ctx, *on, d.Force), d.Node, next)
	case d.Wanted && d.Action == ActionNone:
		r.cfg.Desired.ResetMultiAttachReported(desired.Spec.Name, d.Node)
		r.cfg.Executor.AttachObserved(desired.Spec, d.Node, desired.Nodes[d.Node])
		r.reportAgain(*on)
	case d.Wanted && d.Code == ReasonHeld:
		r.reportWaitingForDetach(ctx, desired, d.Node, d.HeldBy)
	case d.Wanted && d.Action == ActionWait:
		logger.V(4).Info("Not attaching yet", "node", d.Node, "reason", d.Reason())
	case d.Wanted && d.Action == ActionAttach:
		return !r.attach(ctx, desired, d.Node, next) || desired.Spec.MultiAttach
	}
	return true
}

// attach starts attaching the volume to the node and reports whether it started.
// The executor checks again, under the volume's lock, that no other node holds a
// single-attach volume.
func (r *Reconciler) attach(ctx context.Context, desired cache.DesiredVolume, node string, next *requeue) bool {
	err := r.cfg.Executor.Attach(ctx, desired.Spec, node, desired.Nodes[node])
	var held *operationexecutor.HeldError
	if errors.As(err, &held) {
		r.reportWaitingForDetach(ctx, desired, node, held.Nodes)
		return false
	}
	return r.handleStartError(ctx, err, node, next)
}

// reportAgain lists a wanted, attached volume in node status again if it was
// taken out for a detach that is no longer running (the detach was called off, or
// the previous controller stopped in the middle of it).
func (r *Reconciler) reportAgain(on cache.OnNode) {
	if !on.HiddenFromNodeStatus || r.cfg.Executor.IsRunning(on.Volume, on.Node) {
		return
	}
	if r.cfg.Actual.SetHiddenFromNodeStatus(on.Volume, on.Node, false) {
		r.cfg.NodeStatus.Enqueue(on.Node)
	}
}

// handleStartError reports whether the operation started, and schedules a retry
// when it is backing off.
func (r *Reconciler) handleStartError(ctx context.Context, err error, node string, next *requeue) bool {
	var backoff *operationexecutor.BackoffError
	switch {
	case err == nil:
		return true
	case errors.As(err, &backoff):
		next.at(backoff.Remaining)
	case errors.Is(err, operationexecutor.ErrPending), errors.Is(err, operationexecutor.ErrStopped):
	case errors.As(err, new(*operationexecutor.HoldersUnknownError)):
		// The volume is queued again once the state is known to be complete.
		klog.FromContext(ctx).V(2).Info("Not attaching yet", "node", node, "reason", err)
	default:
		klog.FromContext(ctx).Error(err, "Starting an operation failed", "node", node)
		next.at(time.Second)
	}
	return false
}

func (r *Reconciler) reportWaitingForDetach(ctx context.Context, desired cache.DesiredVolume, node string, holders []string) {
	if !r.cfg.Desired.MarkMultiAttachReported(desired.Spec.Name, node) {
		return
	}
	var holdingPods []cache.PodRef
	for _, h := range holders {
		holdingPods = append(holdingPods, desired.Nodes[h]...)
	}
	r.cfg.Metrics.WaitsForDetach.Inc()
	klog.FromContext(ctx).Info("Waiting for detach: single-attach volume is held by another node",
		"node", node, "attachedTo", holders, "pods", podKeys(holdingPods))
	r.cfg.Events.EmitEach(desired.Nodes[node], v1.EventTypeWarning, podevents.ReasonFailedAttach, func(p cache.PodRef) string {
		return podevents.WaitingForDetach(desired.Spec.DisplayName, p.Namespace, holdingPods)
	})
}

func podKeys(pods []cache.PodRef) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.Key())
	}
	return out
}
