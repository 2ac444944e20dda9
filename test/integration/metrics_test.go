package integration

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
	"github.com/attachdetach-controller/attachdetach-controller/internal/monitoring"
	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

// TestMetrics plays a failed attach, an attach, a wait for detach, a forced
// detach and a detach, scraping /metrics of the running controller along the way,
// then checks the metrics kube-controller-manager v1.37 exports under the same
// names (each with exactly its label names, and the label values the scenario
// produced), the client-go metrics, and every expression of the alerting rules and
// the dashboard under manifests/ against what the scrapes showed.
func TestMetrics(t *testing.T) {
	lease := "metrics-" + rand.String(5)
	s := newScenario(t, scenarioOptions{controllerArgs: []string{
		"--http-endpoint=127.0.0.1:0", "--leader-elect=true", "--leader-elect-resource-namespace=kube-system",
		"--leader-elect-resource-name=" + lease, "--max-wait-for-unmount=1s",
	}})
	from, to := s.Nodes[0], s.Nodes[1]
	plugin := "kubernetes.io/csi:" + s.Driver
	var page string
	scrape := func() string {
		page = scrapeMetrics(t, s.ctrl.HTTPAddress())
		return page
	}
	s.Eventually("the controller serving /metrics", func() bool { return s.ctrl.HTTPAddress() != "" })

	vol := s.CreateVolume("data", workload.VolumeOptions{})
	s.Attacher.FailAttach(vol.Handle, "rpc error: code = Internal desc = disk is busy")
	s.CreatePod("app", from, vol.Claim)
	s.Eventually("a failed attach in storage_operation_duration_seconds", func() bool {
		return strings.Contains(scrape(), `operation_name="volume_attach",status="fail-unknown"`)
	})
	failed := page
	s.Attacher.ClearFailures(vol.Handle)
	s.WaitAttached(vol, from)

	// The pod leaves, kubelet keeps the volume mounted, and a pod on another node
	// needs it: a wait for unmount and a wait for detach at once.
	s.Must(s.Kubelet.SetStuck(from, vol.UniqueName(), true))
	s.DeletePodNow("app")
	s.CreatePod("moved", to, vol.Claim)
	s.Eventually("both waits in /metrics", func() bool {
		scrape()
		return hasSample(page, "attachdetach_controller_volumes_waiting_for_detach", "1") &&
			hasSample(page, "attachdetach_controller_volumes_waiting_for_unmount", "1")
	})
	waiting := page

	// The node stops being Ready: after --max-wait-for-unmount the volume is
	// force-detached and moves.
	s.Must(s.Kubelet.SetReady(t.Context(), from, false))
	s.WaitDetached(vol, from)
	s.WaitAttached(vol, to)
	s.Eventually("the attached volume in attachdetach_controller_total_volumes", func() bool {
		return strings.Contains(scrape(), `attachdetach_controller_total_volumes{plugin_name="`+plugin+`",state="actual_state_of_world"} 1`)
	})
	attached := page

	s.DeletePod("moved")
	s.WaitDetached(vol, to)
	s.Eventually("the detach in storage_operation_duration_seconds", func() bool {
		return strings.Contains(scrape(), `operation_name="volume_detach",status="success"`)
	})

	seen := monitoring.Scrape{}
	for _, p := range []string{failed, waiting, attached, page} {
		sc, err := monitoring.ParseScrape(strings.NewReader(p))
		s.Must(err)
		seen.Merge(sc)
	}

	t.Run("upstream names and labels", func(t *testing.T) {
		histogram := func(name string, labels []string, values map[string][]string) []exported {
			return []exported{
				{name + "_bucket", slices.Sorted(slices.Values(append(slices.Clone(labels), "le"))), values},
				{name + "_count", labels, values},
				{name + "_sum", labels, values},
			}
		}
		queues := map[string][]string{"name": {"pods", "node_status", "volumes"}}
		want := []exported{
			{"attachdetach_controller_total_volumes", []string{"plugin_name", "state"},
				map[string][]string{"plugin_name": {plugin}, "state": {"desired_state_of_world", "actual_state_of_world"}}},
			{"attach_detach_controller_attachdetach_controller_forced_detaches", []string{"reason"},
				map[string][]string{"reason": {"timeout", "out-of-service"}}},
			{"storage_count_attachable_volumes_in_use", []string{"node", "volume_plugin"},
				map[string][]string{"node": {from, to}, "volume_plugin": {plugin}}},
			{"workqueue_depth", []string{"name"}, queues},
			{"workqueue_adds_total", []string{"name"}, queues},
			{"workqueue_retries_total", []string{"name"}, queues},
			{"workqueue_unfinished_work_seconds", []string{"name"}, queues},
			{"workqueue_longest_running_processor_seconds", []string{"name"}, queues},
			{"rest_client_requests_total", []string{"code", "host", "method"}, map[string][]string{"code": {"200", "201"}, "method": {"GET", "POST", "PATCH", "DELETE"}}},
			{"leader_election_master_status", []string{"name"}, map[string][]string{"name": {lease}}},
		}
		want = append(want, histogram("storage_operation_duration_seconds", []string{"migrated", "operation_name", "status", "volume_plugin"},
			map[string][]string{"volume_plugin": {plugin}, "operation_name": {"volume_attach", "volume_detach"}, "status": {"success", "fail-unknown"}, "migrated": {"false"}})...)
		want = append(want, histogram("workqueue_queue_duration_seconds", []string{"name"}, queues)...)
		want = append(want, histogram("workqueue_work_duration_seconds", []string{"name"}, queues)...)
		want = append(want, histogram("rest_client_request_duration_seconds", []string{"host", "verb"}, map[string][]string{"verb": {"GET", "POST", "PATCH", "DELETE"}})...)
		want = append(want, histogram("rest_client_rate_limiter_duration_seconds", []string{"host", "verb"}, map[string][]string{"verb": {"GET", "POST", "PATCH", "DELETE"}})...)
		for _, w := range want {
			if got := seen.Labels(w.name); !slices.Equal(got, w.labels) {
				t.Errorf("%s labels = %v, want %v", w.name, got, w.labels)
				continue
			}
			for _, label := range slices.Sorted(maps.Keys(w.values)) {
				for _, value := range w.values[label] {
					if !seen.HasValue(w.name, label, value) {
						t.Errorf("%s: no series with %s=%q", w.name, label, value)
					}
				}
			}
		}
	})

	t.Run("alerting rules", func(t *testing.T) {
		rules, err := monitoring.ReadRules(repoRoot(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range rules.Groups {
			for _, r := range g.Rules {
				if err := seen.Check(r.Expr); err != nil {
					t.Errorf("rule %s: %v", r.Name(), err)
				}
			}
		}
	})

	t.Run("dashboard", func(t *testing.T) {
		queries, err := monitoring.ReadDashboard(repoRoot(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range queries {
			if err := seen.Check(q.Expr); err != nil {
				t.Errorf("%s: %v", q.Where, err)
			}
		}
	})
}

// exported is a metric a scrape must have: exactly these label names (sorted),
// and series with each of these label values.
type exported struct {
	name   string
	labels []string
	values map[string][]string
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := binaries.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// hasSample tells whether the page has the unlabelled series with the value.
func hasSample(page, name, value string) bool {
	return slices.Contains(strings.Split(page, "\n"), name+" "+value)
}

func scrapeMetrics(t *testing.T, addr string) string {
	t.Helper()
	var body []byte
	suite.EventuallySucceeds(t, suite.WaitTimeout, "scraping /metrics", func() error {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /metrics: %s", resp.Status)
		}
		body, err = io.ReadAll(resp.Body)
		return err
	})
	return string(body)
}

// scrapeFamilies scrapes the controller's /metrics and parses it by family name.
func scrapeFamilies(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(scrapeMetrics(t, addr)))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return families
}

// label returns the value of the metric's label name, or "".
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
