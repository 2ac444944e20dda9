// Package monitoring reads what the repository ships for Prometheus and Grafana
// (manifests/monitoring/rules.yaml with its promtool test rules_test.yaml, the
// PrometheusRule of the manifests/components/prometheus-rules component and
// manifests/monitoring/dashboard.json) and checks their expressions against a
// scrape of the controller's /metrics: every metric an expression selects must be
// exported, and every label it matches on, groups by or joins on must be one of
// that metric's labels, with the value it asks for when it asks for one.
package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// Paths of the files, from the repository's root.
const (
	RulesFile          = "manifests/monitoring/rules.yaml"
	RulesTestFile      = "manifests/monitoring/rules_test.yaml"
	PrometheusRuleFile = "manifests/components/prometheus-rules/prometheusrule.yaml"
	DashboardFile      = "manifests/monitoring/dashboard.json"
	RunbooksFile       = "docs/runbooks.md"
)

// Job is the scrape job every selector of the rules names, as the matcher
// JobSelector: the one token to replace for a job of another name.
const (
	Job         = "attachdetach-controller"
	JobSelector = `job="` + Job + `"`
)

// RunbookURL is the runbook_url of an alert: its section of RunbooksFile, by
// the anchor GitHub gives the heading "## <alert>".
func RunbookURL(alert string) string {
	return "https://github.com/attachdetach-controller/attachdetach-controller/blob/main/" + RunbooksFile + "#" + strings.ToLower(alert)
}

// RuleGroups is the content of a Prometheus rules file, and the spec of a
// PrometheusRule.
type RuleGroups struct {
	Groups []RuleGroup `json:"groups"`
}

// RuleGroup is one group of rules.
type RuleGroup struct {
	Name  string `json:"name"`
	Rules []Rule `json:"rules"`
}

// Rule is an alerting or a recording rule.
type Rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Name is the rule's alert or record name.
func (r Rule) Name() string { return r.Alert + r.Record }

// ReadRules reads the plain rules file under root.
func ReadRules(root string) (RuleGroups, error) {
	var g RuleGroups
	return g, readYAML(filepath.Join(root, RulesFile), &g)
}

// ReadPrometheusRule reads the groups of the component's PrometheusRule under root.
func ReadPrometheusRule(root string) (RuleGroups, error) {
	var obj struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string            `json:"name"`
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec RuleGroups `json:"spec"`
	}
	path := filepath.Join(root, PrometheusRuleFile)
	if err := readYAML(path, &obj); err != nil {
		return RuleGroups{}, err
	}
	if obj.Kind != "PrometheusRule" {
		return RuleGroups{}, fmt.Errorf("%s: kind %q, want PrometheusRule", path, obj.Kind)
	}
	return obj.Spec, nil
}

// RulesTest is the part of a promtool rules test file that says which alerts
// each test expects.
type RulesTest struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		Name           string `json:"name"`
		AlertRuleTests []struct {
			EvalTime  string `json:"eval_time"`
			AlertName string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// ReadRulesTest reads RulesTestFile under root, keeping what RulesTest holds.
func ReadRulesTest(root string) (RulesTest, error) {
	path := filepath.Join(root, RulesTestFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return RulesTest{}, err
	}
	var t RulesTest
	if err := yaml.Unmarshal(data, &t); err != nil {
		return RulesTest{}, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

func readYAML(path string, into any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// Query is one PromQL expression of the dashboard, with where it is.
type Query struct {
	Where string
	Expr  string
}

// dashboard is the part of a Grafana dashboard that holds queries.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// DashboardVariables are the values the dashboard's variables take in Queries.
var DashboardVariables = map[string]string{
	"$__rate_interval": "5m",
	"$job":             "attachdetach-controller",
	"$volume_plugin":   ".*",
}

// ReadDashboard returns the PromQL expressions of the dashboard under root, its
// variables replaced by DashboardVariables: every panel's targets, and the
// metric and label each label_values() variable query reads, as the selector
// metric{label=~".+"}.
func ReadDashboard(root string) ([]Query, error) {
	path := filepath.Join(root, DashboardFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []Query
	for _, p := range d.Panels {
		for i, t := range p.Targets {
			out = append(out, Query{Where: fmt.Sprintf("panel %q, target %d", p.Title, i), Expr: substitute(t.Expr)})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			return nil, fmt.Errorf("%s: variable %s: %w", path, v.Name, err)
		}
		args, ok := strings.CutPrefix(q.Query, "label_values(")
		i := strings.LastIndex(args, ",")
		if !ok || i < 0 || !strings.HasSuffix(args, ")") {
			return nil, fmt.Errorf("%s: variable %s: want label_values(<selector>, <label>), got %q", path, v.Name, q.Query)
		}
		selector, label := strings.TrimSpace(args[:i]), strings.TrimSpace(strings.TrimSuffix(args[i+1:], ")"))
		out = append(out, Query{
			Where: fmt.Sprintf("variable %s", v.Name),
			Expr:  fmt.Sprintf(`count by (%s) (%s)`, label, substitute(selector)),
		})
	}
	return out, nil
}

func substitute(expr string) string {
	for name, value := range DashboardVariables {
		expr = strings.ReplaceAll(expr, name, value)
	}
	return expr
}
