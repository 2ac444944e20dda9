package monitoring

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// TargetLabels are the labels Prometheus adds to every series it scrapes, which
// a /metrics page therefore never shows: the target's, and the cluster a
// Prometheus that scrapes several clusters tells them apart by.
var TargetLabels = []string{"job", "instance", "cluster"}

// upMetric is the series Prometheus writes for each target, up or not, with
// the target labels only.
const upMetric = "up"

// Scrape is what a /metrics page exports: for each series name (a histogram's
// name_bucket, name_sum and name_count apart), its label names, each with the
// values seen.
type Scrape map[string]map[string]map[string]bool

// ParseScrape reads a /metrics page in the Prometheus text format.
func ParseScrape(r io.Reader) (Scrape, error) {
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing the scrape: %w", err)
	}
	s := Scrape{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				s.add(name+"_sum", m.GetLabel(), nil)
				s.add(name+"_count", m.GetLabel(), nil)
				s.add(name+"_bucket", m.GetLabel(), map[string]string{"le": ""})
			case dto.MetricType_SUMMARY:
				s.add(name+"_sum", m.GetLabel(), nil)
				s.add(name+"_count", m.GetLabel(), nil)
				s.add(name, m.GetLabel(), map[string]string{"quantile": ""})
			default:
				s.add(name, m.GetLabel(), nil)
			}
		}
	}
	return s, nil
}

func (s Scrape) add(name string, pairs []*dto.LabelPair, extra map[string]string) {
	if s[name] == nil {
		s[name] = map[string]map[string]bool{}
	}
	set := func(label, value string) {
		if s[name][label] == nil {
			s[name][label] = map[string]bool{}
		}
		s[name][label][value] = true
	}
	for _, p := range pairs {
		set(p.GetName(), p.GetValue())
	}
	for label, value := range extra {
		set(label, value)
	}
}

// Merge adds what another scrape exported.
func (s Scrape) Merge(other Scrape) {
	for name, labels := range other {
		if s[name] == nil {
			s[name] = map[string]map[string]bool{}
		}
		for label, values := range labels {
			if s[name][label] == nil {
				s[name][label] = map[string]bool{}
			}
			maps.Copy(s[name][label], values)
		}
	}
}

// Labels returns the sorted label names of a series name; nil if it is not
// exported.
func (s Scrape) Labels(name string) []string {
	return slices.Sorted(maps.Keys(s[name]))
}

// HasValue tells whether some series of the name has the label with the value.
func (s Scrape) HasValue(name, label, value string) bool {
	return s[name][label][value]
}

// Check parses a PromQL expression and returns what of it the scrape does not
// have: a metric that is not exported, a label matcher, grouping or join label
// the metric does not have, or a value an equality matcher asks for that no
// series has. Target labels (TargetLabels) are taken as present.
func (s Scrape) Check(expr string) error {
	root, err := parser.ParseExpr(expr)
	if err != nil {
		return fmt.Errorf("parsing %q: %w", expr, err)
	}
	var errs []error
	parser.Inspect(root, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			errs = append(errs, s.checkSelector(n))
		case *parser.AggregateExpr:
			errs = append(errs, s.checkLabelsBelow(n.Expr, n.Grouping, "grouping"))
		case *parser.BinaryExpr:
			if vm := n.VectorMatching; vm != nil && len(vm.MatchingLabels) > 0 && vm.On {
				errs = append(errs, s.checkLabelsBelow(n.LHS, vm.MatchingLabels, "on()"), s.checkLabelsBelow(n.RHS, vm.MatchingLabels, "on()"))
			}
		}
		return nil
	})
	return errors.Join(errs...)
}

func (s Scrape) checkSelector(v *parser.VectorSelector) error {
	name := v.Name
	if name == upMetric {
		for _, m := range v.LabelMatchers {
			if m.Name != labels.MetricName && !slices.Contains(TargetLabels, m.Name) {
				return fmt.Errorf("%s has no label %s (it has the target labels %v)", name, m.Name, TargetLabels)
			}
		}
		return nil
	}
	if s[name] == nil {
		return fmt.Errorf("metric %s is not exported", name)
	}
	var errs []error
	for _, m := range v.LabelMatchers {
		switch {
		case m.Name == labels.MetricName || slices.Contains(TargetLabels, m.Name):
		case s[name][m.Name] == nil:
			errs = append(errs, fmt.Errorf("%s has no label %s (it has %v)", name, m.Name, s.Labels(name)))
		case m.Type == labels.MatchEqual && !s.HasValue(name, m.Name, m.Value):
			errs = append(errs, fmt.Errorf("no series of %s has %s=%q (values seen: %v)", name, m.Name, m.Value, slices.Sorted(maps.Keys(s[name][m.Name]))))
		}
	}
	return errors.Join(errs...)
}

// checkLabelsBelow checks that every vector selector under node has the labels.
func (s Scrape) checkLabelsBelow(node parser.Node, names []string, what string) error {
	var errs []error
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		v, ok := n.(*parser.VectorSelector)
		if !ok || s[v.Name] == nil {
			return nil
		}
		for _, label := range names {
			if s[v.Name][label] == nil && !slices.Contains(TargetLabels, label) {
				errs = append(errs, fmt.Errorf("%s label %s: %s has no such label (it has %v)", what, label, v.Name, s.Labels(v.Name)))
			}
		}
		return nil
	})
	return errors.Join(errs...)
}
