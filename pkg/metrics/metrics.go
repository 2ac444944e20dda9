// Package metrics defines the controller's Prometheus metrics and the registry
// they are served from.
package metrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

const namespace = "attachdetach_controller"

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
	// MultiAttachRefusals counts attaches refused because a single-attach volume
	// was held by another node.
	MultiAttachRefusals prometheus.Counter
	// IsLeader is 1 while this replica leads.
	IsLeader prometheus.Gauge
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
			Help: "Detaches of volumes the node still listed as in use, by reason (out-of-service, unmount-timeout).",
		}, []string{"reason"}),
		MultiAttachRefusals: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "multi_attach_refusals_total",
			Help: "Waits that began because a single-attach volume was held by another node.",
		}),
		IsLeader: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "leader",
			Help: "1 while this replica holds the leader lease, else 0.",
		}),
	}
	m.Registry.MustRegister(
		m.Operations, m.OperationDuration, m.NodeStatusPatches, m.ForceDetaches, m.MultiAttachRefusals, m.IsLeader,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// StateSource reports the sizes of the controller's state, read at scrape time.
type StateSource struct {
	DesiredVolumes   func() int
	Attachments      func() (total, attached int)
	ReconcileBacklog func() int
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
	}
	for _, g := range gauges {
		if err := m.Registry.Register(g); err != nil {
			return fmt.Errorf("registering state metrics: %w", err)
		}
	}
	return nil
}

// ObserveOperation records one finished operation.
func (m *Metrics) ObserveOperation(operation string, started time.Time, err error) {
	result := "success"
	if err != nil {
		result = "error"
	}
	m.Operations.WithLabelValues(operation, result).Inc()
	m.OperationDuration.WithLabelValues(operation, result).Observe(time.Since(started).Seconds())
}
