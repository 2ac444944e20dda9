package monitoring

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

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
		{expr: `absent(up{job="x"}) or count by (cluster) (up{job="x"} == 1)`},
		{expr: `up{name="volumes"}`, wantErr: "up has no label name"},
		{expr: `max by (cluster) (workqueue_depth{cluster="c1"})`},
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

// TestEveryAlertHasARunbook: each alert's runbook_url is its section of
// docs/runbooks.md, which has a heading for it.
func TestEveryAlertHasARunbook(t *testing.T) {
	root := repoRoot(t)
	rules, err := ReadRules(root)
	if err != nil {
		t.Fatal(err)
	}
	runbooks, err := os.ReadFile(filepath.Join(root, RunbooksFile))
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	for _, line := range strings.Split(string(runbooks), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			headings[strings.TrimSpace(h)] = true
		}
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if got, want := r.Annotations["runbook_url"], RunbookURL(r.Alert); got != want {
				t.Errorf("alert %s: runbook_url %q, want %q", r.Alert, got, want)
			}
			if !headings[r.Alert] {
				t.Errorf("alert %s: %s has no heading \"## %s\"", r.Alert, RunbooksFile, r.Alert)
			}
		}
	}
}

// TestEverySelectorNamesTheJob: every series an alert selects is selected by
// the scrape job JobSelector names, the one token to replace for another job.
func TestEverySelectorNamesTheJob(t *testing.T) {
	rules, err := ReadRules(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			root, err := parser.ParseExpr(r.Expr)
			if err != nil {
				t.Fatalf("rule %s: %v", r.Name(), err)
			}
			parser.Inspect(root, func(node parser.Node, _ []parser.Node) error {
				v, ok := node.(*parser.VectorSelector)
				if !ok {
					return nil
				}
				if !slices.ContainsFunc(v.LabelMatchers, func(m *labels.Matcher) bool {
					return m.Name == "job" && m.Type == labels.MatchEqual && m.Value == Job
				}) {
					t.Errorf("rule %s: %s does not select %s", r.Name(), v, JobSelector)
				}
				return nil
			})
			if strings.Contains(strings.ReplaceAll(r.Expr, JobSelector, ""), "job") {
				t.Errorf("rule %s names the job other than as %s", r.Name(), JobSelector)
			}
		}
	}
}

// TestEveryAlertIsUnitTested: rules_test.yaml tests the rules file, and for
// each alert has a case where it fires and one where it stays silent.
func TestEveryAlertIsUnitTested(t *testing.T) {
	root := repoRoot(t)
	rules, err := ReadRules(root)
	if err != nil {
		t.Fatal(err)
	}
	tests, err := ReadRulesTest(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Base(RulesFile)}; !slices.Equal(tests.RuleFiles, want) {
		t.Errorf("%s tests %v, want %v", RulesTestFile, tests.RuleFiles, want)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTests {
			if len(a.ExpAlerts) > 0 {
				fires[a.AlertName] = true
			} else {
				silent[a.AlertName] = true
			}
		}
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if !fires[r.Alert] || !silent[r.Alert] {
				t.Errorf("alert %s: %s has a case where it fires: %v, one where it stays silent: %v", r.Alert, RulesTestFile, fires[r.Alert], silent[r.Alert])
			}
		}
	}
}

// TestPromtoolTestRules: promtool, at the pinned version, passes the unit tests
// of the rules. It builds promtool the first time (see hack/build-tools.sh);
// -short skips it.
func TestPromtoolTestRules(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs promtool")
	}
	promtool, err := binaries.Tool(t.Context(), binaries.Promtool)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), promtool, "test", "rules", RulesTestFile)
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules %s: %v\n%s", RulesTestFile, err, out)
	}
	t.Logf("%s", out)
}
