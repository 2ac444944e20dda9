package monitoring

import (
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := binaries.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestPrometheusRuleMatchesRulesFile: the component's PrometheusRule and the plain
// rules file hold the same rules.
func TestPrometheusRuleMatchesRulesFile(t *testing.T) {
	root := repoRoot(t)
	plain, err := ReadRules(root)
	if err != nil {
		t.Fatal(err)
	}
	crd, err := ReadPrometheusRule(root)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(plain, crd) {
		t.Errorf("%s and %s differ: edit both the same way", RulesFile, PrometheusRuleFile)
	}
}

// TestRulesAreComplete: every alert has a unique name, a severity and a summary.
func TestRulesAreComplete(t *testing.T) {
	rules, err := ReadRules(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || seen[r.Alert] {
				t.Errorf("alert %q: missing or repeated name", r.Alert)
			}
			seen[r.Alert] = true
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("alert %s: needs a severity label and a summary annotation", r.Alert)
			}
		}
	}
	if len(seen) == 0 {
		t.Error("no alert")
	}
}

// TestDashboardQueries: the dashboard has queries, each with its variables
// replaced.
func TestDashboardQueries(t *testing.T) {
	queries, err := ReadDashboard(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(queries) < 10 {
		t.Fatalf("%d queries, want the dashboard's", len(queries))
	}
	for _, q := range queries {
		if strings.Contains(q.Expr, "$") {
			t.Errorf("%s: variable left in %q", q.Where, q.Expr)
		}
	}
}

func TestCheck(t *testing.T) {
	const page = `# TYPE storage_operation_duration_seconds histogram
storage_operation_duration_seconds_bucket{migrated="false",operation_name="volume_attach",status="success",volume_plugin="kubernetes.io/csi:d",le="0.1"} 1
storage_operation_duration_seconds_bucket{migrated="false",operation_name="volume_attach",status="success",volume_plugin="kubernetes.io/csi:d",le="+Inf"} 1
storage_operation_duration_seconds_sum{migrated="false",operation_name="volume_attach",status="success",volume_plugin="kubernetes.io/csi:d"} 0.05
storage_operation_duration_seconds_count{migrated="false",operation_name="volume_attach",status="success",volume_plugin="kubernetes.io/csi:d"} 1
# TYPE workqueue_depth gauge
workqueue_depth{name="volumes"} 0
`
	s, err := ParseScrape(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		expr    string
		wantErr string
	}{
		{expr: `histogram_quantile(0.99, sum by (le, volume_plugin) (rate(storage_operation_duration_seconds_bucket{job="x",operation_name="volume_attach"}[5m])))`},
		{expr: `max by (name) (workqueue_depth{instance="a"}) / on (name) workqueue_depth`},
		{expr: `storage_operation_duration_seconds_count{status=~"fail.*"}`},
		{expr: `workqueue_adds_total`, wantErr: "metric workqueue_adds_total is not exported"},
		{expr: `workqueue_depth{queue="volumes"}`, wantErr: "workqueue_depth has no label queue"},
		{expr: `workqueue_depth{name="pods"}`, wantErr: `no series of workqueue_depth has name="pods"`},
		{expr: `sum by (le) (storage_operation_duration_seconds_count)`, wantErr: "grouping label le: storage_operation_duration_seconds_count has no such label"},
		{expr: `workqueue_depth * on (node) workqueue_depth`, wantErr: "on() label node"},
		{expr: `sum(`, wantErr: "parsing"},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			err := s.Check(tc.expr)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Check: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Check error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestPromtoolCheckRules: promtool, at the pinned version, accepts the rules file.
// It builds promtool the first time (see hack/build-tools.sh); -short skips it.
func TestPromtoolCheckRules(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs promtool")
	}
	promtool, err := binaries.Tool(t.Context(), binaries.Promtool)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), promtool, "check", "rules", RulesFile)
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", RulesFile, err, out)
	}
	t.Logf("%s", out)
}
