// Package controller wires the attach/detach controller together: shared informers
// feed the desired state (through the populator's pod queue), the actual state
// (from VolumeAttachments, through the attachments recorder) and the node
// register; their changes put the affected volumes on the reconciler's queue and
// the affected nodes on the status updater's queue.
//
// The controller writes to the API server in exactly these places:
//   - VolumeAttachment create and delete, by the operation executor;
//   - node status (status.volumesAttached), by the status updater;
//   - Events on pods, through the event recorder;
//   - the leader election Lease, by the command around it.
//
// Besides those it reads the API server directly only to settle what the
// informers cannot: the start-up check that the VolumeAttachment and node
// informers are current, the same check of the VolumeAttachments each time their
// informer stopped watching (see relist.go), a node's status before a detach, a
// node's pods before a forced detach (populator.PodChecker), and an object after
// a write of unknown outcome. Its own writes come back to it through the informers like anyone
// else's; state that a write changes is recorded from the informer, or, where the
// write's answer comes first, in a way the informer's later delivery agrees with.
package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/attachments"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/explain"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/operationexecutor"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/podevents"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/populator"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/reconciler"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/shadow"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/statusupdater"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/watchrecord"
)

// Options are the controller's settings.
type Options struct {
	// MaxWaitForUnmount bounds the wait for kubelet to unmount before a force
	// detach from a node that is not Ready.
	MaxWaitForUnmount time.Duration
	// DisableForceDetachOnTimeout waits for unmount forever.
	DisableForceDetachOnTimeout bool
	// MaxWaitForUnmountPerDriver overrides MaxWaitForUnmount for the CSI drivers
	// (and in-tree plugins, by plugin name) it names.
	MaxWaitForUnmountPerDriver map[string]reconciler.DriverUnmountPolicy
	// DetachOnShutdownTaint treats a node that is not Ready and carries the cloud
	// provider's shutdown taint like one with the out-of-service taint.
	DetachOnShutdownTaint bool
	// Shadow decides without acting, and compares each decision, once it has
	// stood for ShadowGrace, with what node status shows (see package shadow).
	Shadow      bool
	ShadowGrace time.Duration
	// SyncPeriod is the period of the full safety pass; DisableSync turns it off.
	SyncPeriod  time.Duration
	DisableSync bool
	// OperationTimeout bounds one attach or detach wait for the external-attacher.
	OperationTimeout time.Duration
	// Workers reconcile volumes in parallel; StatusWorkers write node status.
	Workers       int
	StatusWorkers int
	// StatusMinBatchWindow is the shortest time a node's status write waits for
	// more changes to the node (see package statusupdater).
	StatusMinBatchWindow time.Duration
	// ShutdownGrace bounds how long Run waits, once ctx ends, for running
	// operations to get the answers to their writes.
	ShutdownGrace time.Duration
}

// DefaultOptions returns the defaults, which match kube-controller-manager's.
func DefaultOptions() Options {
	return Options{
		MaxWaitForUnmount: 6 * time.Minute,
		SyncPeriod:        time.Minute,
		OperationTimeout:  2 * time.Minute,
		Workers:           10,
		StatusWorkers:     16,
		ShutdownGrace:     5 * time.Second,
		ShadowGrace:       2 * time.Minute,
	}
}

// Validate refuses settings the controller cannot run with.
func (o Options) Validate() error {
	switch {
	case o.MaxWaitForUnmount <= 0:
		return fmt.Errorf("the max wait for unmount must be positive, got %s", o.MaxWaitForUnmount)
	case slices.ContainsFunc(slices.Collect(maps.Values(o.MaxWaitForUnmountPerDriver)), func(p reconciler.DriverUnmountPolicy) bool {
		return !p.NeverForce && p.MaxWait <= 0
	}):
		return fmt.Errorf("every driver's max wait for unmount must be positive or never")
	case !o.DisableSync && o.SyncPeriod <= 0:
		return fmt.Errorf("the reconcile sync period must be positive, got %s", o.SyncPeriod)
	case o.OperationTimeout <= 0:
		return fmt.Errorf("the operation timeout must be positive, got %s", o.OperationTimeout)
	case o.Workers < 1:
		return fmt.Errorf("workers must be at least 1, got %d", o.Workers)
	case o.Shadow && o.ShadowGrace <= 0:
		return fmt.Errorf("the shadow grace period must be positive, got %s", o.ShadowGrace)
	case o.StatusWorkers < 1:
		return fmt.Errorf("status workers must be at least 1, got %d", o.StatusWorkers)
	case o.StatusMinBatchWindow < 0 || o.StatusMinBatchWindow > statusupdater.MaxBatchWindow:
		return fmt.Errorf("the status minimum batch window must be between 0 and %s, got %s", statusupdater.MaxBatchWindow, o.StatusMinBatchWindow)
	}
	return nil
}

// Executor runs attach and detach operations (see package operationexecutor).
type Executor interface {
	reconciler.Executor
	// ObserveVolumeAttachment passes what the informer saw of a VolumeAttachment
	// (nil once deleted) to the operations waiting for it.
	ObserveVolumeAttachment(name string, va *storagev1.VolumeAttachment)
	// WaitsFor tells whether a running operation waits for what the informer
	// shows of the VolumeAttachment; its Done follows.
	WaitsFor(name string) bool
	// ResetBackoff lets the next operation on the volume and node start at once;
	// it reports whether the pair was backing off after a failed attach.
	ResetBackoff(volume volumename.UniqueName, node string) bool
	// Settle reads an object whose existence or deletion only the API server can
	// settle, and records what it learns.
	Settle(ctx context.Context, att cache.Attachment)
	// ForgetExpired drops what is remembered of failures long past.
	ForgetExpired()
	// Backoff tells how long the next attach or detach of the volume on the node
	// must wait after a failure, and which.
	Backoff(volume volumename.UniqueName, node string) (time.Duration, string)
	// Wait waits until every running operation has ended, or ctx ends.
	Wait(ctx context.Context) error
}

// Controller is the attach/detach controller.
type Controller struct {
	opts       Options
	client     kubernetes.Interface
	metadata   metadata.Interface
	factory    informers.SharedInformerFactory
	informers  informerSet
	desired    *cache.DesiredState
	actual     *cache.ActualState
	nodes      *cache.Nodes
	populator  *populator.Populator
	executor   Executor
	reconciler *reconciler.Reconciler
	status     *statusupdater.Updater
	metrics    *metrics.Metrics
	// attachmentWatches records the lapses of the VolumeAttachment informer
	// (see relist.go), and attachmentsProven after which of them the start-up
	// check's read was sent.
	attachmentWatches *watchrecord.Lapses
	attachmentsProven provenLapses
	// leads is what the informers' records of quorum reads returned when the
	// controller was made: its process leads from then on, so a quorum read sent
	// since shows every write of an earlier leader.
	leads informerLeads
	// attachments records VolumeAttachments in the actual state.
	attachments *attachments.Recorder
	// nodesMu keeps the node event handlers out while the periodic pass
	// compares (see rebuild.go).
	nodesMu sync.Mutex
	// deletedNodes holds the deleted nodes to forget (see forget.go).
	deletedNodes  workqueue.TypedRateLimitingInterface[string]
	backoffExpiry time.Duration
	// presentWait is how long the start-up check gives an informer to apply
	// the changes up to the present (see startup.go).
	presentWait time.Duration
	// writing is the context of Run once it runs to write (not in shadow mode):
	// the event handlers, which may have been registered in standby (Prepare),
	// delete every cache probe the informer shows under it (see cacheprobe.go),
	// so that no such write outlives the lead.
	writing atomic.Pointer[context.Context]
	// delivered tells, per informer, what its event handler has finished with;
	// attachmentsDelivered is the VolumeAttachment informer's (see delivered.go).
	delivered            []*delivered
	attachmentsDelivered *delivered
	// filled tells that the state was filled (see fill), and leading, closed
	// when Run starts, ends the evaluations of a standby that Prepare filled it;
	// standbyDrained is closed once they ended.
	filled         bool
	leading        chan struct{}
	standbyDrained chan struct{}
}

// Clients are the API clients the controller writes with.
type Clients struct {
	// API creates and deletes VolumeAttachments, and reads the claims and
	// PersistentVolumes the start-up check needs whole.
	API kubernetes.Interface
	// Metadata lists pods, nodes and VolumeAttachments by their metadata only,
	// for the start-up check and the proof that every VolumeAttachment is known,
	// and reads the present's resourceVersion (see startup.go): they compare
	// names, UIDs and resource versions, and a metadata list costs the API server
	// and the controller a fraction of a full one. It shares API's rate limit.
	// Run needs it; Snapshot does not.
	Metadata metadata.Interface
	// NodeStatus writes node.status.volumesAttached; give it priority over API
	// (see package ratelimit) so that kubelet never waits behind a backlog.
	NodeStatus kubernetes.Interface
	// Backlog, if not nil, tells how long API requests now wait for the rate
	// limit; node status writes are batched over that long.
	Backlog func() time.Duration
}

// New builds a controller on the factory's informers, which may already run
// (StartInformers). It writes nothing before Run. A standby may make it before it
// leads and Prepare it; Run then starts the lead.
func New(clients Clients, factory informers.SharedInformerFactory, recorder record.EventRecorder, m *metrics.Metrics, opts Options) (*Controller, error) {
	client := clients.API
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	inf, err := newInformerSet(factory)
	if err != nil {
		return nil, err
	}
	c := &Controller{
		opts:      opts,
		client:    client,
		metadata:  clients.Metadata,
		factory:   factory,
		informers: inf,
		desired:   cache.NewDesiredState(),
		actual:    cache.NewActualState(),
		nodes:     cache.NewNodes(),
		metrics:   m,

		attachmentWatches: inf.attachmentWatches,
		deletedNodes:      newDeletedNodesQueue(),
		backoffExpiry:     backoffExpiryPeriod,
		presentWait:       presentWaitPeriod,
		leading:           make(chan struct{}),
	}
	c.recordLead()
	if opts.Shadow {
		for _, e := range shadow.Expectations {
			m.ExportShadowComparisons(string(e))
		}
	}
	events := podevents.NewEmitter(recorder)
	c.populator = populator.New(populator.Listers{
		Pods:       inf.pods.Lister(),
		PodIndexer: inf.pods.Informer().GetIndexer(),
		Claims:     inf.claims.Lister(),
		PVs:        inf.pvs.Lister(),
		Drivers:    inf.drivers.Lister(),
	}, c.desired, reconcilerQueue{c})
	pods := populator.PodChecker{Client: client, Populator: c.populator}
	c.status = statusupdater.New(clients.NodeStatus, inf.nodes.Lister(), c.actual, pods, m, clients.Backlog, c.opts.StatusMinBatchWindow)
	c.executor = operationexecutor.New(operationexecutor.Config{
		Client:     client,
		VALister:   inf.attachments.Lister(),
		Actual:     c.actual,
		Nodes:      c.nodes,
		NodeStatus: c.status,
		Events:     events,
		Metrics:    m,
		Timeout:    opts.OperationTimeout,
		Wanted:     c.desired,
		Pods:       pods,
		Done:       reconcilerQueue{c},
	})
	c.reconciler = reconciler.New(reconciler.Config{
		Desired:    c.desired,
		Actual:     c.actual,
		Nodes:      c.nodes,
		Executor:   c.executor,
		NodeStatus: c.status,
		Events:     events,
		Metrics:    m,
		UnmountPolicy: reconciler.UnmountPolicy{
			Default:    reconciler.DriverUnmountPolicy{MaxWait: opts.MaxWaitForUnmount},
			NeverForce: opts.DisableForceDetachOnTimeout,
			PerDriver:  opts.MaxWaitForUnmountPerDriver,
		},
		DetachOnShutdownTaint: opts.DetachOnShutdownTaint,
		Pods:                  inf.podGaps,
	})
	c.attachments = c.newAttachments(inf.attachments.Lister())
	return c, nil
}

// exportState registers the state's metrics. Only the leader exports them: a
// standby's state (Prepare) would count every volume twice in a sum over
// replicas.
func (c *Controller) exportState() error {
	err := c.metrics.RegisterState(metrics.StateSource{
		DesiredVolumes:   c.desired.VolumeCount,
		Attachments:      c.actual.Counts,
		ReconcileBacklog: c.reconciler.QueueLength,
		DesiredByPlugin:  c.desired.AttachmentsByPlugin,
		AttachedByPlugin: c.actual.AttachedByPlugin,
		InUse:            c.desired.PodVolumesByNode,
		WaitsForDetach:   func() metrics.Wait { return metrics.Wait(c.desired.WaitsForDetach(time.Now())) },
		UnmountWaits:     func() metrics.Wait { return metrics.Wait(c.actual.UnmountWaits(time.Now())) },

		AttachmentsUnproven: func() bool { return c.actual.Incomplete() != "" },
	})
	if err != nil {
		return err
	}
	return c.metrics.SetUnmountPolicies(unmountPolicies(c.opts))
}

// recordLead records what the informers' records of quorum reads return now:
// the process leads from then on, so a quorum read sent since shows every write
// of an earlier leader. New records it, for a controller made by a leader, and
// Run again, for one a standby made.
func (c *Controller) recordLead() {
	c.leads = informerLeads{
		attachments: c.informers.attachmentReads.Lead(),
		nodes:       c.informers.nodeReads.Lead(),
		pods:        c.informers.podReads.Lead(),
	}
}

// newAttachments returns the recorder of the VolumeAttachments vas lists.
func (c *Controller) newAttachments(vas storagelisters.VolumeAttachmentLister) *attachments.Recorder {
	return attachments.New(attachments.Config{
		Listers: attachments.Listers{
			Attachments: vas,
			PVs:         c.informers.pvs.Lister(),
			Nodes:       c.informers.nodes.Lister(),
		},
		Actual:     c.actual,
		PVs:        c.populator,
		Executor:   c.executor,
		NodeStatus: c.status,
		Volumes:    c.reconciler,
	})
}

// unmountPolicies lists the waits for unmount by driver ("" for the default),
// and the drivers that never force-detach on a timeout.
func unmountPolicies(opts Options) (map[string]time.Duration, map[string]bool) {
	waits, never := map[string]time.Duration{}, map[string]bool{}
	all := maps.Clone(opts.MaxWaitForUnmountPerDriver)
	if all == nil {
		all = map[string]reconciler.DriverUnmountPolicy{}
	}
	all[""] = reconciler.DriverUnmountPolicy{MaxWait: opts.MaxWaitForUnmount}
	for driver, p := range all {
		if p.NeverForce || opts.DisableForceDetachOnTimeout {
			never[driver] = true
		} else {
			waits[driver] = p.MaxWait
		}
	}
	return waits, never
}

// Prepare fills the state from the informers and writes nothing. A standby calls
// it once its informers have synced, so that a take-over (Run) only proves them
// current and applies what changed since: the event handlers it registers keep
// the state following the informers, and the pods they queue are evaluated one
// at a time while the standby waits. Call Run only after Prepare returned.
func (c *Controller) Prepare(ctx context.Context) error {
	// A standby that stops before it leads stops its queues with ctx.
	context.AfterFunc(ctx, c.shutDownQueues)
	if err := c.startInformers(ctx); err != nil {
		return err
	}
	if _, err := c.fill(ctx); err != nil {
		return err
	}
	c.standbyDrained = make(chan struct{})
	go func() {
		defer close(c.standbyDrained)
		c.populator.Drain(ctx, 1, c.leading)
	}()
	return nil
}

// startInformers starts the informers that do not run yet, and waits until they
// all have synced: a pod is evaluated only from synced caches of claims,
// PersistentVolumes and CSIDrivers, whose objects held then re-evaluate no pod.
func (c *Controller) startInformers(ctx context.Context) error {
	c.factory.Start(ctx.Done())
	return WaitForInformers(ctx, c.factory)
}

// shutDownQueues stops the queues; the workers that take from them end.
func (c *Controller) shutDownQueues() {
	c.populator.ShutDown()
	c.reconciler.ShutDown()
	c.status.ShutDown()
	c.deletedNodes.ShutDown()
}

// fill registers the event handlers, and returns once they delivered what the
// informers hold and the pods they queued are evaluated, with how many
// evaluations it made.
func (c *Controller) fill(ctx context.Context) (int, error) {
	// Everything is queued for a first look; the volumes that may need an
	// attach or a detach go first (Release).
	c.reconciler.Hold()
	c.filled = true
	return c.fillState(ctx)
}

// Run starts the informers, rebuilds the state from them before the first
// decision, calls onReady, and then reconciles until ctx ends. It returns once the
// operations that were running have ended, or ShutdownGrace after ctx ended.
func (c *Controller) Run(ctx context.Context, onReady func()) error {
	logger := klog.FromContext(ctx)
	if c.metadata == nil {
		return errors.New("the controller runs with a metadata client (Clients.Metadata) for its start-up check")
	}
	c.recordLead()
	if err := c.exportState(); err != nil {
		return err
	}
	defer c.shutDownQueues()
	c.attachmentWatches.Follow(0, c.markIncomplete(ctx))
	c.informers.podGaps.Follow(c.judgeWaitsAgain)
	if err := c.startInformers(ctx); err != nil {
		return err
	}
	if !c.opts.Shadow {
		c.writing.Store(&ctx)
	}
	// The state is filled (unless a standby filled it) while the informers are
	// proven current. The handlers then finish with what the proven caches hold,
	// and the pods they queued are evaluated. What rests on every
	// VolumeAttachment waits for that informer's check, which takes longest.
	check := c.startCheck(ctx)
	close(c.leading)
	started, prepared := time.Now(), c.filled
	evaluated := 0
	if !c.filled {
		var err error
		if evaluated, err = c.fill(ctx); err != nil {
			return err
		}
	}
	if err := check.wait(ctx, "pods", "nodes"); err != nil {
		return err
	}
	if err := c.waitForClaimsOfPods(ctx); err != nil {
		return err
	}
	if err := c.waitForHandlers(ctx, c.delivered...); err != nil {
		return err
	}
	if c.standbyDrained != nil {
		<-c.standbyDrained
	}
	evaluated += c.populator.Drain(ctx, c.opts.Workers, c.leading)
	if err := check.wait(ctx); err != nil {
		return err
	}
	check.report(ctx)
	// A probe of an earlier leader that the informer showed while this
	// controller waited as a standby, writing nothing, is deleted now; those
	// it shows from here on, its handler deletes.
	if writing := c.writing.Load(); writing != nil {
		if _, err := c.informers.attachments.Lister().Get(attachments.CacheProbe); err == nil {
			go c.removeCacheProbe(*writing)
		}
	}
	if err := c.waitForHandlers(ctx, c.attachmentsDelivered); err != nil {
		return err
	}
	if err := c.hideDetaching(); err != nil {
		return err
	}
	total, attached := c.actual.Counts()
	logger.Info("State rebuilt, starting to reconcile", "duration", time.Since(started), "prepared", prepared,
		"podEvaluations", evaluated, "desiredVolumes", c.desired.VolumeCount(), "volumeAttachments", total, "attached", attached)

	proven := uint64(0)
	if p := c.attachmentsProven; p.ok && c.attachmentWatches.IfNoLapseSince(p.lapses, func() { c.actual.SetIncomplete("") }) {
		proven = p.lapses
		logger.V(2).Info("The start-up check proved every VolumeAttachment known", "lapses", proven)
	}
	onReady()
	c.enqueueEverything()
	go c.proveAttachments(ctx, proven)
	go c.runForgetting(ctx)
	go c.populator.Run(ctx, c.opts.Workers)
	if c.opts.Shadow {
		explainer := c.Explainer()
		compare := shadow.New(logger, c.opts.ShadowGrace, c.informers.nodes.Lister(), func(expected shadow.Expectation, agreed bool) {
			c.metrics.ObserveShadowComparison(string(expected), agreed)
		}, func(name volumename.UniqueName) string {
			return explain.VolumeText(explainer.Volume(name, true))
		})
		go compare.Run(ctx, time.Second)
		go c.reconciler.RunShadow(ctx, c.opts.Workers, compare.Observe)
	} else {
		go c.status.Run(ctx, c.opts.StatusWorkers)
		go c.reconciler.Run(ctx, c.opts.Workers)
	}
	// The workers run already: the first volume released is reconciled while
	// the others are still being sorted.
	c.reconciler.Release()
	if !c.opts.DisableSync {
		go wait.UntilWithContext(ctx, c.resync, c.opts.SyncPeriod)
	}
	<-ctx.Done()
	waitCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.ShutdownGrace)
	defer cancel()
	if err := c.executor.Wait(waitCtx); err != nil {
		logger.Error(err, "Stopping while operations still run")
	}
	return nil
}

// resync is the periodic safety pass: it brings the node register and the actual
// state in line with the informers, so that an event lost on the way costs at most
// one period, re-evaluates every pod, and re-queues every volume and node. Nothing
// needed for progress or bounded memory waits for it: it may be off.
func (c *Controller) resync(ctx context.Context) {
	if err := c.reconcileNodes(); err != nil {
		klog.FromContext(ctx).Error(err, "Periodic check of the node register failed")
	}
	if err := c.attachments.Reconcile(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Periodic check of the VolumeAttachments failed")
	}
	keys, err := c.populator.AllPods()
	if err != nil {
		klog.FromContext(ctx).Error(err, "Periodic re-evaluation of pods failed")
	}
	for _, key := range keys {
		c.populator.Enqueue(key)
	}
	c.enqueueEverything()
}

func (c *Controller) enqueueEverything() {
	for _, v := range c.desired.Volumes() {
		c.reconciler.Enqueue(v)
	}
	for _, v := range c.actual.Volumes() {
		c.reconciler.Enqueue(v)
	}
	for _, name := range c.nodes.Names() {
		if n := c.nodes.Get(name); n.Exists() && n.Managed {
			c.status.Enqueue(name)
		}
	}
}

// reconcilerQueue is the reconciler's queue, for the populator and the executor:
// they are built before the reconciler, which drives the executor.
type reconcilerQueue struct{ c *Controller }

// Enqueue asks for the volume to be reconciled.
func (q reconcilerQueue) Enqueue(volume volumename.UniqueName) { q.c.reconciler.Enqueue(volume) }

// judgeWaitsAgain queues every attached volume when a gap in what the pod
// informer shows ends: the waits for unmount it held may be over.
func (c *Controller) judgeWaitsAgain() {
	for _, v := range c.actual.Volumes() {
		c.reconciler.Enqueue(v)
	}
}
