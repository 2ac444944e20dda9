package metrics

import (
	"errors"
	"math"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/util/workqueue"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

func TestStateGaugesAndOperations(t *testing.T) {
	m := New()
	err := m.RegisterState(StateSource{
		DesiredVolumes:   func() int { return 3 },
		Attachments:      func() (int, int) { return 5, 4 },
		ReconcileBacklog: func() int { return 2 },
		DesiredByPlugin: func() map[string]int {
			return map[string]int{"kubernetes.io/csi:a.example.com": 3, "kubernetes.io/iscsi": 1}
		},
		AttachedByPlugin: func() map[string]int { return map[string]int{"kubernetes.io/csi:a.example.com": 2} },
		InUse: func() map[string]map[string]int {
			return map[string]map[string]int{"node-a": {"kubernetes.io/csi:a.example.com": 2}, "node-b": {"kubernetes.io/fc": 1}}
		},
		WaitsForDetach: func() Wait { return Wait{Count: 1, Oldest: 90 * time.Second} },
		UnmountWaits:   func() Wait { return Wait{} },

		AttachmentsUnproven: func() bool { return true },
	})
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveOperation(Op{Kind: OperationAttach, Plugin: "kubernetes.io/csi:a.example.com", Started: time.Now()})
	m.ObserveOperation(Op{Kind: OperationDetach, Plugin: "kubernetes.io/csi:a.example.com", Migrated: true, Started: time.Now(), Err: errors.New("boom")})
	m.ObserveForcedDetach(cache.ForcedOnTimeout)
	m.WaitsForDetach.Inc()
	m.ObserveDroppedEvent("Normal", "queue_full")

	for _, tc := range []struct {
		name string
		want string
	}{
		{name: "attachdetach_controller_attached_volumes", want: `
# HELP attachdetach_controller_attached_volumes VolumeAttachments the external-attacher marked attached.
# TYPE attachdetach_controller_attached_volumes gauge
attachdetach_controller_attached_volumes 4
`},
		{name: "attachdetach_controller_desired_volumes", want: `
# HELP attachdetach_controller_desired_volumes Volumes that some pod with a node needs attached.
# TYPE attachdetach_controller_desired_volumes gauge
attachdetach_controller_desired_volumes 3
`},
		{name: "attachdetach_controller_operations_total", want: `
# HELP attachdetach_controller_operations_total Attach and detach operations that finished, by operation and result.
# TYPE attachdetach_controller_operations_total counter
attachdetach_controller_operations_total{operation="attach",result="error"} 0
attachdetach_controller_operations_total{operation="attach",result="success"} 1
attachdetach_controller_operations_total{operation="detach",result="error"} 1
attachdetach_controller_operations_total{operation="detach",result="success"} 0
`},
		{name: "attachdetach_controller_reconcile_queue_length", want: `
# HELP attachdetach_controller_reconcile_queue_length Volumes waiting to be reconciled.
# TYPE attachdetach_controller_reconcile_queue_length gauge
attachdetach_controller_reconcile_queue_length 2
`},
		{name: "attachdetach_controller_volume_attachments", want: `
# HELP attachdetach_controller_volume_attachments VolumeAttachments known to the controller, in any state.
# TYPE attachdetach_controller_volume_attachments gauge
attachdetach_controller_volume_attachments 5
`},
		{name: "attachdetach_controller_waits_for_detach_total", want: `
# HELP attachdetach_controller_waits_for_detach_total Waits that began because a single-attach volume a pod needs was held by another node (the "Waiting for detach" event).
# TYPE attachdetach_controller_waits_for_detach_total counter
attachdetach_controller_waits_for_detach_total 1
`},
		{name: "attachdetach_controller_events_dropped_total", want: `
# HELP attachdetach_controller_events_dropped_total Events on pods never written, by type (Normal, Warning) and cause (queue_full: too many normal events waiting; spam_filter: too many events about one pod; rejected: refused by the API server; retry_limit: failed 12 times with errors that may pass).
# TYPE attachdetach_controller_events_dropped_total counter
attachdetach_controller_events_dropped_total{cause="queue_full",type="Normal"} 1
attachdetach_controller_events_dropped_total{cause="rejected",type="Normal"} 0
attachdetach_controller_events_dropped_total{cause="rejected",type="Warning"} 0
attachdetach_controller_events_dropped_total{cause="retry_limit",type="Normal"} 0
attachdetach_controller_events_dropped_total{cause="retry_limit",type="Warning"} 0
attachdetach_controller_events_dropped_total{cause="spam_filter",type="Normal"} 0
attachdetach_controller_events_dropped_total{cause="spam_filter",type="Warning"} 0
`},
		{name: "attachdetach_controller_volume_attachments_unproven", want: `
# HELP attachdetach_controller_volume_attachments_unproven 1 while single-attach attaches wait because the VolumeAttachment informer stopped watching and is not yet proven to show every VolumeAttachment again; 0 otherwise.
# TYPE attachdetach_controller_volume_attachments_unproven gauge
attachdetach_controller_volume_attachments_unproven 1
`},
		{name: "attachdetach_controller_volumes_waiting_for_detach", want: `
# HELP attachdetach_controller_volumes_waiting_for_detach Volumes pods on a node wait for because another node holds them (single-attach), one per volume and waiting node.
# TYPE attachdetach_controller_volumes_waiting_for_detach gauge
attachdetach_controller_volumes_waiting_for_detach 1
`},
		{name: "attachdetach_controller_oldest_wait_for_detach_seconds", want: `
# HELP attachdetach_controller_oldest_wait_for_detach_seconds How long the oldest of the waits counted by volumes_waiting_for_detach has lasted; 0 when none.
# TYPE attachdetach_controller_oldest_wait_for_detach_seconds gauge
attachdetach_controller_oldest_wait_for_detach_seconds 90
`},
		{name: "attachdetach_controller_volumes_waiting_for_unmount", want: `
# HELP attachdetach_controller_volumes_waiting_for_unmount Attached volumes no pod on their node needs any more that still wait for kubelet to unmount them before the detach.
# TYPE attachdetach_controller_volumes_waiting_for_unmount gauge
attachdetach_controller_volumes_waiting_for_unmount 0
`},
		{name: "attachdetach_controller_total_volumes", want: `
# HELP attachdetach_controller_total_volumes Volume and node pairs the controller knows, by plugin and by state: wanted attached (desired_state_of_world) or attached (actual_state_of_world).
# TYPE attachdetach_controller_total_volumes gauge
attachdetach_controller_total_volumes{plugin_name="kubernetes.io/csi:a.example.com",state="actual_state_of_world"} 2
attachdetach_controller_total_volumes{plugin_name="kubernetes.io/csi:a.example.com",state="desired_state_of_world"} 3
attachdetach_controller_total_volumes{plugin_name="kubernetes.io/iscsi",state="desired_state_of_world"} 1
`},
		{name: "storage_count_attachable_volumes_in_use", want: `
# HELP storage_count_attachable_volumes_in_use Attachable volumes of the pods on each node, by plugin, one per pod and volume.
# TYPE storage_count_attachable_volumes_in_use gauge
storage_count_attachable_volumes_in_use{node="node-a",volume_plugin="kubernetes.io/csi:a.example.com"} 2
storage_count_attachable_volumes_in_use{node="node-b",volume_plugin="kubernetes.io/fc"} 1
`},
		{name: "attach_detach_controller_attachdetach_controller_forced_detaches", want: `
# HELP attach_detach_controller_attachdetach_controller_forced_detaches Detaches of volumes the node may still have mounted, by reason (timeout, out-of-service).
# TYPE attach_detach_controller_attachdetach_controller_forced_detaches counter
attach_detach_controller_attachdetach_controller_forced_detaches{reason="out-of-service"} 0
attach_detach_controller_attachdetach_controller_forced_detaches{reason="timeout"} 1
`},
		{name: "attachdetach_controller_force_detaches_total", want: `
# HELP attachdetach_controller_force_detaches_total Detaches of volumes the node still listed as in use, by reason (out-of-service, timeout, shutdown).
# TYPE attachdetach_controller_force_detaches_total counter
attachdetach_controller_force_detaches_total{reason="out-of-service"} 0
attachdetach_controller_force_detaches_total{reason="shutdown"} 0
attachdetach_controller_force_detaches_total{reason="timeout"} 1
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(tc.want), tc.name); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestStorageOperationDuration(t *testing.T) {
	m := New()
	m.ObserveOperation(Op{Kind: OperationAttach, Plugin: "kubernetes.io/csi:a.example.com", Started: time.Now()})
	m.ObserveOperation(Op{Kind: OperationDetach, Plugin: "kubernetes.io/fc", Migrated: true, Started: time.Now(), Err: errors.New("boom")})
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var series []string
	for _, f := range families {
		if f.GetName() != "storage_operation_duration_seconds" {
			continue
		}
		for _, metric := range f.GetMetric() {
			var labels []string
			for _, l := range metric.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			series = append(series, strings.Join(labels, ","))
			var bounds []float64
			for _, b := range metric.GetHistogram().GetBucket() {
				bounds = append(bounds, b.GetUpperBound())
			}
			if want := []float64{.1, .25, .5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600}; !slices.Equal(bounds, want) {
				t.Errorf("buckets = %v, want %v", bounds, want)
			}
		}
	}
	want := []string{
		"migrated=false,operation_name=volume_attach,status=success,volume_plugin=kubernetes.io/csi:a.example.com",
		"migrated=true,operation_name=volume_detach,status=fail-unknown,volume_plugin=kubernetes.io/fc",
	}
	if !slices.Equal(series, want) {
		t.Errorf("series = %q, want %q", series, want)
	}
}

func TestHookClientGo(t *testing.T) {
	m := New()
	m.HookClientGo()
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "test"})
	defer queue.ShutDown()
	queue.Add("a")
	queue.AddRateLimited("b")
	want := `
# HELP workqueue_adds_total Items added to the work queue.
# TYPE workqueue_adds_total counter
workqueue_adds_total{name="test"} 1
# HELP workqueue_retries_total Items put back on the work queue to be retried later.
# TYPE workqueue_retries_total counter
workqueue_retries_total{name="test"} 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "workqueue_adds_total", "workqueue_retries_total"); err != nil {
		t.Error(err)
	}

	// The histograms have client-go's (component-base's) buckets.
	item, _ := queue.Get()
	queue.Done(item)
	u := url.URL{Scheme: "https", Host: "api.example.com:6443"}
	clientmetrics.RequestLatency.Observe(t.Context(), "GET", u, 30*time.Millisecond)
	clientmetrics.RateLimiterLatency.Observe(t.Context(), "GET", u, time.Millisecond)
	queueBounds := []float64{1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1, 10}
	requestBounds := []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}
	for name, want := range map[string][]float64{
		"workqueue_queue_duration_seconds":          queueBounds,
		"workqueue_work_duration_seconds":           queueBounds,
		"rest_client_request_duration_seconds":      requestBounds,
		"rest_client_rate_limiter_duration_seconds": requestBounds,
	} {
		got := histogramBounds(t, m, name)
		if len(got) != len(want) {
			t.Errorf("%s buckets = %v, want %v", name, got, want)
			continue
		}
		for i := range want {
			if math.Abs(got[i]-want[i]) > want[i]*1e-9 {
				t.Errorf("%s buckets = %v, want %v", name, got, want)
				break
			}
		}
	}
}

// histogramBounds returns the bucket bounds of the first series of the histogram.
func histogramBounds(t *testing.T, m *Metrics, name string) []float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name || len(f.GetMetric()) == 0 {
			continue
		}
		var bounds []float64
		for _, b := range f.GetMetric()[0].GetHistogram().GetBucket() {
			bounds = append(bounds, b.GetUpperBound())
		}
		return bounds
	}
	t.Errorf("no %s series", name)
	return nil
}

// TestKnownSeriesStartAtZero: a fresh registry exports, at 0, every series of
// the controller's counters whose label values are known in advance, so that a
// rate or an increase sees the first event.
func TestKnownSeriesStartAtZero(t *testing.T) {
	m := New()
	m.ExportShadowComparisons("attached", "detached")
	want := map[string][]string{
		"attachdetach_controller_operations_total": {
			`operation="attach",result="error"`, `operation="attach",result="success"`,
			`operation="detach",result="error"`, `operation="detach",result="success"`,
		},
		"attachdetach_controller_node_status_patches_total":                {`result="error"`, `result="node-gone"`, `result="success"`},
		"attachdetach_controller_force_detaches_total":                     {`reason="out-of-service"`, `reason="shutdown"`, `reason="timeout"`},
		"attach_detach_controller_attachdetach_controller_forced_detaches": {`reason="out-of-service"`, `reason="timeout"`},
		"attachdetach_controller_shadow_comparisons_total": {
			`expected="attached",result="agree"`, `expected="attached",result="disagree"`,
			`expected="detached",result="agree"`, `expected="detached",result="disagree"`,
		},
		"attachdetach_controller_events_dropped_total": {
			`cause="queue_full",type="Normal"`, `cause="rejected",type="Normal"`, `cause="rejected",type="Warning"`,
			`cause="retry_limit",type="Normal"`, `cause="retry_limit",type="Warning"`,
			`cause="spam_filter",type="Normal"`, `cause="spam_filter",type="Warning"`,
		},
		"attachdetach_controller_waits_for_detach_total": {""},
		"attachdetach_controller_leader":                 {""},
	}
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, f := range families {
		if _, ok := want[f.GetName()]; !ok {
			continue
		}
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			if v := s.GetCounter().GetValue() + s.GetGauge().GetValue(); v != 0 {
				t.Errorf("%s{%s} = %v, want 0", f.GetName(), strings.Join(labels, ","), v)
			}
			got[f.GetName()] = append(got[f.GetName()], strings.Join(labels, ","))
		}
	}
	for name, series := range want {
		if !slices.Equal(got[name], series) {
			t.Errorf("%s series = %q, want %q", name, got[name], series)
		}
	}
}
