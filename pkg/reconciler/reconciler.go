// Package reconciler decides, one volume at a time, what must happen to it: first
// the detaches from nodes that no longer need it (waiting for unmount, honouring
// node health and the out-of-service taint), then the attaches to nodes that need
// it, refusing a second node for a single-attach volume and telling the pods why.
// Volumes come from a work queue fed by informer events, so a change is acted on at
// once; a periodic pass re-queues everything as a safety net.
package reconciler

import (
	"context"
	"errors"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/csivolume"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/operationexecutor"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/podevents"
)

// Executor starts attach and detach operations.
type Executor interface {
	Attach(ctx context.Context, vol cache.Volume, node string, pods []cache.PodRef) error
	Detach(ctx context.Context, att cache.Attachment, multiAttach, force bool) error
	IsRunning(volume csivolume.UniqueName, node string) bool
	AnyRunning(volume csivolume.UniqueName) bool
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
	Events   *podevents.Emitter
	Metrics  *metrics.Metrics
	// MaxWaitForUnmount is how long a volume still mounted on a node that no
	// longer needs it is left attached before a force detach is considered.
	MaxWaitForUnmount time.Duration
	// DisableForceDetachOnTimeout keeps waiting for unmount forever.
	DisableForceDetachOnTimeout bool
	Now                         func() time.Time
}

// Reconciler reconciles volumes taken from its work queue.
type Reconciler struct {
	cfg   Config
	queue workqueue.TypedRateLimitingInterface[csivolume.UniqueName]
}

// New returns a Reconciler.
func New(cfg Config) *Reconciler {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Reconciler{
		cfg: cfg,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[csivolume.UniqueName](),
			workqueue.TypedRateLimitingQueueConfig[csivolume.UniqueName]{Name: "volumes"}),
	}
}

// Enqueue asks for the volume to be reconciled.
func (r *Reconciler) Enqueue(name csivolume.UniqueName) { r.queue.Add(name) }

// QueueLength returns how many volumes wait to be reconciled.
func (r *Reconciler) QueueLength() int { return r.queue.Len() }

// Run reconciles queued volumes with the given number of workers until ctx ends.
func (r *Reconciler) Run(ctx context.Context, workers int) {
	defer r.queue.ShutDown()
	for range workers {
		go wait.UntilWithContext(ctx, r.work, time.Second)
	}
	<-ctx.Done()
}

func (r *Reconciler) work(ctx context.Context) {
	for {
		name, shutdown := r.queue.Get()
		if shutdown {
			return
		}
		if after := r.Sync(ctx, name); after > 0 {
			r.queue.AddAfter(name, after)
		}
		r.queue.Done(name)
	}
}

// Sync reconciles one volume across all nodes and returns when it should be looked
// at again (0: when something changes).
func (r *Reconciler) Sync(ctx context.Context, name csivolume.UniqueName) time.Duration {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "volume", name)
	ctx = klog.NewContext(ctx, logger)
	desired, _ := r.cfg.Desired.Volume(name)
	attachments := r.cfg.Actual.Attachments(name)
	var next requeue
	r.detach(ctx, desired, attachments, &next)
	if len(desired.Nodes) > 0 {
		r.attach(ctx, desired, attachments, &next)
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

func (r *Reconciler) detach(ctx context.Context, desired cache.DesiredVolume, attachments []cache.Attachment, next *requeue) {
	logger := klog.FromContext(ctx)
	for _, att := range attachments {
		if _, wanted := desired.Nodes[att.Node]; wanted {
			r.cfg.Actual.ClearDetachWanted(att.Volume, att.Node)
			continue
		}
		node := r.cfg.Nodes.Get(att.Node)
		if node.Exists && !node.Managed {
			continue
		}
		if att.Deleting || r.cfg.Executor.IsRunning(att.Volume, att.Node) {
			continue
		}
		reason := ""
		switch {
		case !node.Mounted(att.Volume):
		case node.OutOfService:
			reason = "out-of-service"
		default:
			since := r.cfg.Actual.DetachWantedSince(att.Volume, att.Node, r.cfg.Now())
			waited := r.cfg.Now().Sub(since)
			if waited < r.cfg.MaxWaitForUnmount {
				logger.V(4).Info("Waiting for unmount before detaching", "node", att.Node, "waited", waited)
				next.at(r.cfg.MaxWaitForUnmount - waited)
				continue
			}
			if r.cfg.DisableForceDetachOnTimeout || node.Ready {
				logger.V(4).Info("Volume still mounted after the maximum wait; not force-detaching",
					"node", att.Node, "waited", waited, "nodeReady", node.Ready, "forceDetachDisabled", r.cfg.DisableForceDetachOnTimeout)
				continue
			}
			reason = "unmount-timeout"
		}
		err := r.cfg.Executor.Detach(ctx, att, desired.Spec.MultiAttach, reason != "")
		if r.handleStartError(ctx, err, att.Node, next) && reason != "" {
			logger.Info("Force-detaching a volume the node may still have mounted", "node", att.Node, "reason", reason)
			r.cfg.Metrics.ForceDetaches.WithLabelValues(reason).Inc()
		}
	}
}

func (r *Reconciler) attach(ctx context.Context, desired cache.DesiredVolume, attachments []cache.Attachment, next *requeue) {
	spec := desired.Spec
	nodes := make([]string, 0, len(desired.Nodes))
	for n := range desired.Nodes {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	for _, nodeName := range nodes {
		idx := slices.IndexFunc(attachments, func(a cache.Attachment) bool { return a.Node == nodeName })
		if idx >= 0 {
			att := attachments[idx]
			if att.Deleting {
				continue
			}
			if att.Attached {
				r.cfg.Desired.ResetMultiAttachReported(spec.Name, nodeName)
				r.cfg.Executor.AttachObserved(spec, nodeName, desired.Nodes[nodeName])
				continue
			}
		}
		node := r.cfg.Nodes.Get(nodeName)
		if !node.Exists || !node.Managed || r.cfg.Executor.IsRunning(spec.Name, nodeName) {
			continue
		}
		if !spec.MultiAttach {
			if holders := r.holders(spec, nodeName, attachments); len(holders) > 0 {
				r.reportMultiAttach(ctx, desired, nodeName, holders)
				continue
			}
			if idx < 0 && r.cfg.Executor.AnyRunning(spec.Name) {
				continue
			}
		}
		err := r.cfg.Executor.Attach(ctx, spec, nodeName, desired.Nodes[nodeName])
		if r.handleStartError(ctx, err, nodeName, next) && !spec.MultiAttach {
			return
		}
	}
}

// holders returns the nodes other than node where a VolumeAttachment for the
// volume exists, in whatever state.
func (r *Reconciler) holders(spec cache.Volume, node string, attachments []cache.Attachment) []string {
	var out []string
	for _, a := range attachments {
		if a.Node != node {
			out = append(out, a.Node)
		}
	}
	if spec.PVName != "" {
		out = append(out, r.cfg.Actual.UnresolvedHolders(spec.PVName, node)...)
	}
	return out
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
	case errors.Is(err, operationexecutor.ErrPending):
	default:
		klog.FromContext(ctx).Error(err, "Starting an operation failed", "node", node)
		next.at(time.Second)
	}
	return false
}

func (r *Reconciler) reportMultiAttach(ctx context.Context, desired cache.DesiredVolume, node string, holders []string) {
	if !r.cfg.Desired.MarkMultiAttachReported(desired.Spec.Name, node) {
		return
	}
	var holdingPods []cache.PodRef
	for _, h := range holders {
		holdingPods = append(holdingPods, desired.Nodes[h]...)
	}
	r.cfg.Metrics.MultiAttachRefusals.Inc()
	klog.FromContext(ctx).Info("Multi-Attach error: single-attach volume is held by another node",
		"node", node, "attachedTo", holders, "pods", podKeys(holdingPods))
	r.cfg.Events.EmitEach(desired.Nodes[node], v1.EventTypeWarning, podevents.ReasonFailedAttach, func(p cache.PodRef) string {
		return podevents.MultiAttach(desired.Spec.DisplayName, p.Namespace, holdingPods)
	})
}

func podKeys(pods []cache.PodRef) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.Key())
	}
	return out
}
