package chart

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The differences between the chart's objects and the kustomize base's that
// docs/deploy.md ("Install with Helm") documents, and nothing else:
var (
	// The chart creates no Namespace: helm installs into one that exists or that
	// --create-namespace creates, and deletes nothing of it on uninstall.
	onlyInBase = []string{"Namespace"}
	// Labels helm charts carry, and the tool in managed-by (Helm, kustomize).
	toolLabels = []string{
		"app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version", "helm.sh/chart",
	}
)

// TestDefaultValuesRenderTheKustomizeBase renders the chart and the base, alone and
// with each optional component against the values that turn on the same objects,
// and compares the objects field by field.
func TestDefaultValuesRenderTheKustomizeBase(t *testing.T) {
	for _, c := range []struct {
		name       string
		set        string
		components []string
	}{
		{name: "default values"},
		{name: "explain-reader", set: "explainReader.enabled=true", components: []string{"explain-reader"}},
		{name: "prometheus-rules", set: "prometheusRule.enabled=true", components: []string{"prometheus-rules"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var args []string
			if c.set != "" {
				args = []string{"--set", c.set}
			}
			chart := byKey(t, helmTemplate(t, args...))
			base := byKey(t, kustomize(t, overlay(t, c.components)))
			for key, want := range base {
				if slices.Contains(onlyInBase, want.GetKind()) {
					if _, ok := chart[key]; ok {
						t.Errorf("the chart renders %s, which it documents it leaves out", key)
					}
					continue
				}
				got, ok := chart[key]
				if !ok {
					t.Errorf("the base renders %s, the chart does not", key)
					continue
				}
				if diff := compare(normalize(want), normalize(got)); diff != "" {
					t.Errorf("%s differs from the base's:\n%s", key, diff)
				}
			}
			for key := range chart {
				if _, ok := base[key]; !ok {
					t.Errorf("the chart renders %s, the base does not", key)
				}
			}
		})
	}
}

// overlay writes a kustomization of manifests/ with the components and the base's
// labels on their objects too, as an overlay that uses them would carry them.
func overlay(t *testing.T, components []string) string {
	t.Helper()
	dir := t.TempDir()
	// kustomize takes relative paths only.
	rel := func(path string) string {
		r, err := filepath.Rel(dir, path)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	manifests := filepath.Join(root, "manifests")
	k := fmt.Sprintf("resources:\n  - %s\n", rel(manifests))
	if len(components) > 0 {
		k += "labels:\n  - pairs:\n      app.kubernetes.io/part-of: attachdetach-controller\ncomponents:\n"
		for _, c := range components {
			k += fmt.Sprintf("  - %s\n", rel(filepath.Join(manifests, "components", c)))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// byKey indexes objects by kind, namespace and name.
func byKey(t *testing.T, objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	t.Helper()
	m := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		key := fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
		if _, dup := m[key]; dup {
			t.Fatalf("%s rendered twice", key)
		}
		m[key] = o
	}
	return m
}

// normalize drops the labels that tell the tool apart.
func normalize(o *unstructured.Unstructured) map[string]any {
	o = o.DeepCopy()
	labels := o.GetLabels()
	for _, l := range toolLabels {
		delete(labels, l)
	}
	o.SetLabels(labels)
	return o.Object
}

// compare returns "" when the objects are equal, else each field that differs, by
// path, with the base's value and the chart's.
func compare(want, got any) string {
	var b strings.Builder
	diff(&b, "", want, got)
	return b.String()
}

func diff(b *strings.Builder, path string, want, got any) {
	switch w := want.(type) {
	case map[string]any:
		if g, ok := got.(map[string]any); ok {
			keys := slices.Sorted(maps.Keys(w))
			for k := range g {
				if _, ok := w[k]; !ok {
					keys = append(keys, k)
				}
			}
			for _, k := range keys {
				diff(b, path+"."+k, w[k], g[k])
			}
			return
		}
	case []any:
		if g, ok := got.([]any); ok && len(g) == len(w) {
			for i := range w {
				diff(b, fmt.Sprintf("%s[%d]", path, i), w[i], g[i])
			}
			return
		}
	}
	if !reflect.DeepEqual(want, got) {
		fmt.Fprintf(b, "  %s: base %s, chart %s\n", path, show(want), show(got))
	}
}

// show prints a value as JSON, or "absent".
func show(v any) string {
	if v == nil {
		return "absent"
	}
	out, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(out)
}
