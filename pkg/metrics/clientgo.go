package metrics

import (
	"context"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/leaderelection"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/util/workqueue"
)

// client-go reports its work queues, REST requests and leader election through
// process-wide hooks. The collectors below take those reports under the names,
// labels and buckets Kubernetes components export them with.

// requestBuckets are the buckets of the REST client's latency histograms.
var requestBuckets = []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}

// queueBuckets are the buckets of the work queue histograms: 10 ns to 10 s.
var queueBuckets = prometheus.ExponentialBuckets(10e-9, 10, 10)

var hookOnce sync.Once

// HookClientGo makes client-go report its work queues (workqueue_*, per queue
// name), REST requests (rest_client_*) and leader election
// (leader_election_master_status, leader_election_slowpath_total) into m's
// registry. client-go takes the first hooks set in a process and keeps them: call
// it once, before any client, queue or leader elector is created; later calls,
// for any Metrics, do nothing.
func (m *Metrics) HookClientGo() {
	hookOnce.Do(func() {
		q := newQueueMetrics()
		r := newRESTMetrics()
		l := newLeaderMetrics()
		m.Registry.MustRegister(q.collectors()...)
		m.Registry.MustRegister(r.requestLatency, r.rateLimiterLatency, r.requestResult, l.master, l.slowpath)
		workqueue.SetProvider(q)
		clientmetrics.Register(clientmetrics.RegisterOpts{
			RequestLatency:     latencyAdapter{r.requestLatency},
			RateLimiterLatency: latencyAdapter{r.rateLimiterLatency},
			RequestResult:      resultAdapter{r.requestResult},
		})
		leaderelection.SetProvider(l)
	})
}

// queueMetrics is a workqueue.MetricsProvider.
type queueMetrics struct {
	depth, unfinished, longestRunning *prometheus.GaugeVec
	adds, retries                     *prometheus.CounterVec
	latency, workDuration             *prometheus.HistogramVec
}

func newQueueMetrics() *queueMetrics {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: name, Help: help}, []string{"name"})
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "workqueue", Name: name, Help: help}, []string{"name"})
	}
	histogram := func(name, help string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: "workqueue", Name: name, Help: help, Buckets: queueBuckets}, []string{"name"})
	}
	return &queueMetrics{
		depth:          gauge("depth", "Items in the work queue now."),
		unfinished:     gauge("unfinished_work_seconds", "Seconds of work under way that work_duration has not observed yet; a value that keeps growing means a stuck worker."),
		longestRunning: gauge("longest_running_processor_seconds", "Seconds the longest running worker of the queue has been at its item."),
		adds:           counter("adds_total", "Items added to the work queue."),
		retries:        counter("retries_total", "Items put back on the work queue to be retried later."),
		latency:        histogram("queue_duration_seconds", "Seconds an item waits in the work queue before a worker takes it."),
		workDuration:   histogram("work_duration_seconds", "Seconds a worker takes to process an item."),
	}
}

func (q *queueMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{q.depth, q.unfinished, q.longestRunning, q.adds, q.retries, q.latency, q.workDuration}
}

func (q *queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return q.depth.WithLabelValues(name)
}

func (q *queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return q.adds.WithLabelValues(name)
}

func (q *queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return q.latency.WithLabelValues(name)
}

func (q *queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return q.workDuration.WithLabelValues(name)
}

func (q *queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.unfinished.WithLabelValues(name)
}

func (q *queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.longestRunning.WithLabelValues(name)
}

func (q *queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return q.retries.WithLabelValues(name)
}

// restMetrics are the REST client's request metrics.
type restMetrics struct {
	requestLatency, rateLimiterLatency *prometheus.HistogramVec
	requestResult                      *prometheus.CounterVec
}

func newRESTMetrics() restMetrics {
	return restMetrics{
		requestLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rest_client_request_duration_seconds", Help: "Seconds an API request took, by verb and host.", Buckets: requestBuckets,
		}, []string{"verb", "host"}),
		rateLimiterLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rest_client_rate_limiter_duration_seconds", Help: "Seconds an API request waited for the client's rate limit, by verb and host.", Buckets: requestBuckets,
		}, []string{"verb", "host"}),
		requestResult: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rest_client_requests_total", Help: "API requests, by HTTP status code, method and host.",
		}, []string{"code", "method", "host"}),
	}
}

type latencyAdapter struct{ m *prometheus.HistogramVec }

func (a latencyAdapter) Observe(_ context.Context, verb string, u url.URL, latency time.Duration) {
	a.m.WithLabelValues(verb, u.Host).Observe(latency.Seconds())
}

type resultAdapter struct{ m *prometheus.CounterVec }

func (a resultAdapter) Increment(_ context.Context, code, method, host string) {
	a.m.WithLabelValues(code, method, host).Inc()
}

// leaderMetrics is a leaderelection.MetricsProvider and its LeaderMetric.
type leaderMetrics struct {
	master   *prometheus.GaugeVec
	slowpath *prometheus.CounterVec
}

func newLeaderMetrics() *leaderMetrics {
	return &leaderMetrics{
		master: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "leader_election_master_status", Help: "1 while this replica holds the lease named by the name label, 0 once it lost it.",
		}, []string{"name"}),
		slowpath: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leader_election_slowpath_total", Help: "Lease renewals that had to read the lease again, by lease name.",
		}, []string{"name"}),
	}
}

func (l *leaderMetrics) NewLeaderMetric() leaderelection.LeaderMetric { return l }

func (l *leaderMetrics) On(name string)                { l.master.WithLabelValues(name).Set(1) }
func (l *leaderMetrics) Off(name string)               { l.master.WithLabelValues(name).Set(0) }
func (l *leaderMetrics) SlowpathExercised(name string) { l.slowpath.WithLabelValues(name).Inc() }
