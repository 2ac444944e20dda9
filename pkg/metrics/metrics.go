// Package metrics defines the controller's Prometheus metrics and the registry
// they are served from: the controller's own, under attachdetach_controller_, and
// the ones kube-controller-manager's attach/detach controller exports, under the
// same names, labels and buckets (see upstream.go and clientgo.go), so that
// dashboards and alerts built for it keep working.
package metrics

import (
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	v1 "k8s.io/api/core/v1"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/eventsink"
)

const namespace = "attachdetach_controller"

// Operation kinds, as the controller's own metrics label them.
const (
	OperationAttach = "attach"
	OperationDetach = "detach"
)

// Results of a node status patch, the result label of node_status_patches_total.
const (
	PatchSucceeded = "success"
	PatchFailed    = "error"
	// PatchNodeGone: the node was deleted before its status was written.
	PatchNodeGone = "node-gone"
)

// Results of an attach or detach, the result label of operations_total and
// operation_duration_seconds.
const (
	resultSuccess = "success"
	resultError   = "error"
)

// Results of a comparison in shadow mode, the result label of
// shadow_comparisons_total.
const (
	shadowAgree    = "agree"
	shadowDisagree = "disagree"
)

// Metrics holds the collectors the controller updates.
type Metrics struct {
	Registry *prometheus.Registry
	// Operations counts finished attach and detach operations by kind and result.
	Operations *prometheus.CounterVec
	// OperationDuration observes how long attach and detach operations took.
	OperationDuration *prometheus.HistogramVec
	// NodeStatusPatches counts patches of node.status.volumesAttached by result.
	NodeStatusPatches *prometheus.CounterVec
	// ForceDetaches counts detaches of volumes still mounted, by reason.
	ForceDetaches *prometheus.CounterVec
	// WaitsForDetach counts the waits that began because a single-attach volume
	// a pod needs was held by another node: the "Waiting for detach" events.
	WaitsForDetach prometheus.Counter
	// IsLeader is 1 while this replica leads.
	IsLeader prometheus.Gauge
	// ShadowComparisons counts, in shadow mode, the decisions compared with what
	// the cluster showed after the grace period, by what was expected and whether
	// the cluster agreed.
	ShadowComparisons *prometheus.CounterVec
	// EventsDropped counts the events never written, by type and cause (see
	// pkg/eventsink).
	EventsDropped *prometheus.CounterVec

	upstream upstreamMetrics
}

// New creates the collectors and a registry holding them and the Go and process
// collectors.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Operations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "operations_total",
			Help: "Attach and detach operations that finished, by operation and result.",
		}, []string{"operation", "result"}),
		OperationDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "operation_duration_seconds",
			Help:    "Time from the start of an attach or detach operation to its end, by operation and result.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 15),
		}, []string{"operation", "result"}),
		NodeStatusPatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "node_status_patches_total",
			Help: "Patches of node.status.volumesAttached, by result.",
		}, []string{"result"}),
		ForceDetaches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "force_detaches_total",
			Help: "Detaches of volumes the node still listed as in use, by reason (out-of-service, timeout, shutdown).",
		}, []string{"reason"}),
		WaitsForDetach: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "waits_for_detach_total",
			Help: "Waits that began because a single-attach volume a pod needs was held by another node (the \"Waiting for detach\" event).",
		}),
		IsLeader: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "leader",
			Help: "1 while this replica holds the leader lease, else 0.",
		}),
		ShadowComparisons: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "shadow_comparisons_total",
			Help: "In shadow mode, decisions compared with the cluster after the grace period, by expected outcome and result (agree, disagree).",
		}, []string{"expected", "result"}),
		EventsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "events_dropped_total",
			Help: "Events on pods never written, by type (Normal, Warning) and cause (queue_full: too many normal events waiting; spam_filter: too many events about one pod; rejected: refused by the API server; retry_limit: failed 12 times with errors that may pass).",
		}, []string{"type", "cause"}),
		upstream: newUpstreamMetrics(),
	}
	// Every series whose labels are known in advance is exported from the
	// start, at 0, so that a rate or an increase sees the first event, and an
	// alert on it is not an alert on nothing.
	for _, kind := range []string{OperationAttach, OperationDetach} {
		for _, result := range []string{resultSuccess, resultError} {
			m.Operations.WithLabelValues(kind, result)
		}
	}
	for _, result := range []string{PatchSucceeded, PatchFailed, PatchNodeGone} {
		m.NodeStatusPatches.WithLabelValues(result)
	}
	for _, rule := range []cache.ForceRule{cache.ForcedOnTimeout, cache.ForcedOutOfService, cache.ForcedOnShutdown} {
		m.ForceDetaches.WithLabelValues(string(rule))
	}
	// kube-controller-manager's counter has no shutdown reason.
	for _, rule := range []cache.ForceRule{cache.ForcedOnTimeout, cache.ForcedOutOfService} {
		m.upstream.forcedDetaches.WithLabelValues(string(rule))
	}
	// Every drop that can happen is exported from the start, at 0: a warning
	// never waits in a queue of bounded length.
	for _, drop := range [][2]string{
		{v1.EventTypeNormal, eventsink.CauseQueueFull},
		{v1.EventTypeNormal, eventsink.CauseSpamFilter},
		{v1.EventTypeNormal, eventsink.CauseRejected},
		{v1.EventTypeWarning, eventsink.CauseSpamFilter},
		{v1.EventTypeWarning, eventsink.CauseRejected},
		{v1.EventTypeNormal, eventsink.CauseRetryLimit},
		{v1.EventTypeWarning, eventsink.CauseRetryLimit},
	} {
		m.EventsDropped.WithLabelValues(drop[0], drop[1])
	}
	m.Registry.MustRegister(
		m.Operations, m.OperationDuration, m.NodeStatusPatches, m.ForceDetaches, m.WaitsForDetach, m.IsLeader, m.ShadowComparisons, m.EventsDropped,
		m.upstream.operationDuration, m.upstream.forcedDetaches,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m.Registry.MustRegister(buildInfo())
	return m
}

// Wait is a count of waits under way and the age of the oldest.
type Wait struct {
	Count  int
	Oldest time.Duration
}

// StateSource reports the controller's state, read at scrape time.
type StateSource struct {
	DesiredVolumes   func() int
	Attachments      func() (total, attached int)
	ReconcileBacklog func() int
	// DesiredByPlugin counts the (volume, node) pairs the desired state wants
	// attached, by plugin label; AttachedByPlugin the attached ones.
	DesiredByPlugin  func() map[string]int
	AttachedByPlugin func() map[string]int
	// InUse counts, by node and then plugin label, the attachable volumes of the
	// pods on each node, one per pod and volume.
	InUse func() map[string]map[string]int
	// WaitsForDetach are the (volume, node) pairs whose pods wait for the volume
	// to be detached from another node; UnmountWaits the attachments no pod needs
	// that wait for kubelet to unmount before they are detached.
	WaitsForDetach func() Wait
	UnmountWaits   func() Wait
	// AttachmentsUnproven tells whether single-attach attaches wait because
	// the VolumeAttachment informer stopped watching and is not yet proven to
	// show every VolumeAttachment again.
	AttachmentsUnproven func() bool
}

// RegisterState adds gauges read from the controller's state at scrape time.
func (m *Metrics) RegisterState(src StateSource) error {
	gauges := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Name: "desired_volumes",
			Help: "Volumes that some pod with a node needs attached.",
		}, func() float64 { return float64(src.DesiredVolumes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Name: "volume_attachments",
			Help: "VolumeAttachments known to the controller, in any state.",
		}, func() float64 { total, _ := src.Attachments(); return float64(total) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Name: "attached_volumes",
			Help: "VolumeAttachments the external-attacher marked attached.",
		}, func() float64 { _, attached := src.Attachments(); return float64(attached) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Name: "reconcile_queue_length",
			Help: "Volumes waiting to be reconciled.",
		}, func() float64 { return float64(src.ReconcileBacklog()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Name: "volumes_waiting_for_detach",
			Help: "Volumes pods on a node wait for because another node holds them (single-attach), one per volume and waiting node.",
		}, func() float64 { return float64(src.WaitsForDetach().Count) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Name: "oldest_wait_for_detach_seconds",
			Help: "How long the oldest of the waits counted by volumes_waiting_for_detach has lasted; 0 when none.",
		}, func() float64 { return src.WaitsForDetach().Oldest.Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Name: "volumes_waiting_for_unmount",
			Help: "Attached volumes no pod on their node needs any more that still wait for kubelet to unmount them before the detach.",
		}, func() float64 { return float64(src.UnmountWaits().Count) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Name: "oldest_wait_for_unmount_seconds",
			Help: "How long the oldest of the waits counted by volumes_waiting_for_unmount has lasted; 0 when none.",
		}, func() float64 { return src.UnmountWaits().Oldest.Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Name: "volume_attachments_unproven",
			Help: "1 while single-attach attaches wait because the VolumeAttachment informer stopped watching and is not yet proven to show every VolumeAttachment again; 0 otherwise.",
		}, func() float64 {
			if src.AttachmentsUnproven() {
				return 1
			}
			return 0
		}),
		newStateCollector(src),
	}
	for _, g := range gauges {
		if err := m.Registry.Register(g); err != nil {
			return fmt.Errorf("registering state metrics: %w", err)
		}
	}
	return nil
}

// Op describes one finished attach or detach operation.
type Op struct {
	// Kind is OperationAttach or OperationDetach.
	Kind string
	// Plugin is the volume's plugin label (see volumename.PluginLabel).
	Plugin string
	// Migrated is set for an in-tree volume translated to CSI.
	Migrated bool
	Started  time.Time
	Err      error
}

// ObserveOperation records one finished operation, in the controller's own
// metrics and in storage_operation_duration_seconds.
func (m *Metrics) ObserveOperation(op Op) {
	result := resultSuccess
	if op.Err != nil {
		result = resultError
	}
	took := time.Since(op.Started).Seconds()
	m.Operations.WithLabelValues(op.Kind, result).Inc()
	m.OperationDuration.WithLabelValues(op.Kind, result).Observe(took)
	m.upstream.observeOperation(op, took)
}

// ObserveForcedDetach records a detach of a volume the node may still have
// mounted, labelled with the rule that forced it: kube-controller-manager's two
// (the wait for unmount ran out on a node that is not Ready, or the node is
// tainted out-of-service), and this controller's opt-in shutdown taint, which
// only its own counter shows.
func (m *Metrics) ObserveForcedDetach(rule cache.ForceRule) {
	m.ForceDetaches.WithLabelValues(string(rule)).Inc()
	if rule != cache.ForcedOnShutdown {
		m.upstream.forcedDetaches.WithLabelValues(string(rule)).Inc()
	}
}

// ExportShadowComparisons exports, at 0, the agreements and disagreements on
// each of the expected outcomes shadow mode compares (see package shadow).
func (m *Metrics) ExportShadowComparisons(expected ...string) {
	for _, e := range expected {
		m.ShadowComparisons.WithLabelValues(e, shadowAgree)
		m.ShadowComparisons.WithLabelValues(e, shadowDisagree)
	}
}

// ObserveShadowComparison counts one decision compared in shadow mode.
func (m *Metrics) ObserveShadowComparison(expected string, agreed bool) {
	result := shadowAgree
	if !agreed {
		result = shadowDisagree
	}
	m.ShadowComparisons.WithLabelValues(expected, result).Inc()
}

// ObserveDroppedEvent counts an event that was not written.
func (m *Metrics) ObserveDroppedEvent(eventType, cause string) {
	m.EventsDropped.WithLabelValues(eventType, cause).Inc()
}

// SetUnmountPolicies exports the wait for unmount before a force detach, per CSI
// driver (or in-tree plugin) with a policy of its own and under driver="" for the
// others, in seconds; +Inf where force detach on timeout is off.
func (m *Metrics) SetUnmountPolicies(waits map[string]time.Duration, never map[string]bool) error {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Name: "max_wait_for_unmount_seconds",
		Help: "The wait for unmount before a force detach from a node that is not Ready, by driver (\"\" for the default); +Inf: never.",
	}, []string{"driver"})
	for driver, wait := range waits {
		g.WithLabelValues(driver).Set(wait.Seconds())
	}
	for driver := range never {
		g.WithLabelValues(driver).Set(math.Inf(1))
	}
	if err := m.Registry.Register(g); err != nil {
		return fmt.Errorf("registering the unmount policies: %w", err)
	}
	return nil
}
