package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// The metrics below carry the names, labels, label values and buckets that
// kube-controller-manager v1.37's attach/detach controller gives them.

// upstreamOperationNames maps the controller's operation kinds to the
// operation_name label of storage_operation_duration_seconds.
var upstreamOperationNames = map[string]string{
	OperationAttach: "volume_attach",
	OperationDetach: "volume_detach",
}

// Values of the status label of storage_operation_duration_seconds.
const (
	statusSuccess = "success"
	statusFailed  = "fail-unknown"
)

// Values of the state label of attachdetach_controller_total_volumes.
const (
	stateDesired = "desired_state_of_world"
	stateActual  = "actual_state_of_world"
)

type upstreamMetrics struct {
	operationDuration *prometheus.HistogramVec
	forcedDetaches    *prometheus.CounterVec
}

func newUpstreamMetrics() upstreamMetrics {
	return upstreamMetrics{
		operationDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "storage_operation_duration_seconds",
			Help:    "Duration of attach and detach operations, by volume plugin, operation, status and whether the volume was migrated from in-tree.",
			Buckets: []float64{.1, .25, .5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600},
		}, []string{"volume_plugin", "operation_name", "status", "migrated"}),
		forcedDetaches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "attach_detach_controller_attachdetach_controller_forced_detaches",
			Help: "Detaches of volumes the node may still have mounted, by reason (timeout, out-of-service).",
		}, []string{"reason"}),
	}
}

func (u upstreamMetrics) observeOperation(op Op, seconds float64) {
	status := statusSuccess
	if op.Err != nil {
		status = statusFailed
	}
	u.operationDuration.WithLabelValues(op.Plugin, upstreamOperationNames[op.Kind], status, strconv.FormatBool(op.Migrated)).Observe(seconds)
}

// stateCollector reads the per-plugin and per-node volume counts at scrape time.
type stateCollector struct {
	src          StateSource
	totalVolumes *prometheus.Desc
	inUse        *prometheus.Desc
}

func newStateCollector(src StateSource) *stateCollector {
	return &stateCollector{
		src: src,
		totalVolumes: prometheus.NewDesc("attachdetach_controller_total_volumes",
			"Volume and node pairs the controller knows, by plugin and by state: wanted attached (desired_state_of_world) or attached (actual_state_of_world).",
			[]string{"plugin_name", "state"}, nil),
		inUse: prometheus.NewDesc("storage_count_attachable_volumes_in_use",
			"Attachable volumes of the pods on each node, by plugin, one per pod and volume.",
			[]string{"node", "volume_plugin"}, nil),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.totalVolumes
	ch <- c.inUse
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	for state, counts := range map[string]map[string]int{stateDesired: c.src.DesiredByPlugin(), stateActual: c.src.AttachedByPlugin()} {
		for plugin, n := range counts {
			ch <- prometheus.MustNewConstMetric(c.totalVolumes, prometheus.GaugeValue, float64(n), plugin, state)
		}
	}
	for node, counts := range c.src.InUse() {
		for plugin, n := range counts {
			ch <- prometheus.MustNewConstMetric(c.inUse, prometheus.GaugeValue, float64(n), node, plugin)
		}
	}
}
