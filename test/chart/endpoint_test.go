package chart

import (
	"encoding/json"
	"io"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/attachdetach-controller/attachdetach-controller/cmd/attachdetach-controller/app"
)

// TestEndpointValues: by default the endpoint serves HTTPS with a generated
// certificate, the probes ask it over HTTPS and the ServiceMonitor scrapes it
// over HTTPS with Prometheus's token; httpEndpoint.tlsSecretName mounts a
// certificate the controller is given; httpEndpoint.insecure turns plain HTTP on
// everywhere, and the ServiceMonitor then sends no token.
func TestEndpointValues(t *testing.T) {
	for _, c := range []struct {
		name         string
		set          string
		wantInsecure bool
		wantCert     string
		wantScheme   string
		wantEndpoint map[string]any
	}{
		{
			name: "default", wantScheme: "HTTPS",
			wantEndpoint: map[string]any{
				"port": "http-metrics", "path": "/metrics", "scheme": "https",
				"bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
				"tlsConfig":       map[string]any{"insecureSkipVerify": true},
			},
		},
		{
			name: "a token from a Secret", set: "serviceMonitor.authorization.credentials.name=prom-token,serviceMonitor.authorization.credentials.key=token",
			wantScheme: "HTTPS",
			wantEndpoint: map[string]any{
				"port": "http-metrics", "path": "/metrics", "scheme": "https",
				"authorization": map[string]any{"credentials": map[string]any{"name": "prom-token", "key": "token"}},
				"tlsConfig":     map[string]any{"insecureSkipVerify": true},
			},
		},
		{
			name: "a certificate of one's own", set: "httpEndpoint.tlsSecretName=adc-tls",
			wantCert: "/etc/attachdetach-controller/tls/tls.crt", wantScheme: "HTTPS",
			wantEndpoint: map[string]any{
				"port": "http-metrics", "path": "/metrics", "scheme": "https",
				"bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
				"tlsConfig":       map[string]any{"insecureSkipVerify": true},
			},
		},
		{
			name: "plain HTTP", set: "httpEndpoint.insecure=true", wantInsecure: true, wantScheme: "HTTP",
			wantEndpoint: map[string]any{"port": "http-metrics", "path": "/metrics", "scheme": "http"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			set := "serviceMonitor.enabled=true"
			if c.set != "" {
				set += "," + c.set
			}
			objs := helmTemplate(t, "--set", set)
			args := containerArgs(t, objs)
			opts, err := app.ParseFlags(args, io.Discard)
			if err != nil {
				t.Fatalf("the controller refuses the rendered arguments %q: %v", args, err)
			}
			if opts.HTTPEndpointInsecure != c.wantInsecure || opts.TLSCertFile != c.wantCert {
				t.Errorf("insecure %v, certificate %q; want %v, %q (arguments %q)", opts.HTTPEndpointInsecure, opts.TLSCertFile, c.wantInsecure, c.wantCert, args)
			}
			deployment := find(t, objs, "Deployment")
			containers, _, _ := unstructured.NestedSlice(deployment.Object, "spec", "template", "spec", "containers")
			container := containers[0].(map[string]any)
			for _, probe := range []string{"livenessProbe", "readinessProbe"} {
				if scheme, _, _ := unstructured.NestedString(container, probe, "httpGet", "scheme"); scheme != c.wantScheme {
					t.Errorf("%s scheme %q, want %q", probe, scheme, c.wantScheme)
				}
			}
			mounts, _, _ := unstructured.NestedSlice(container, "volumeMounts")
			volumes, _, _ := unstructured.NestedSlice(deployment.Object, "spec", "template", "spec", "volumes")
			if want := c.wantCert != ""; (len(mounts) == 1 && len(volumes) == 1) != want || (!want && (len(mounts) > 0 || len(volumes) > 0)) {
				t.Errorf("volumes %v, mounts %v; want the certificate's Secret mounted: %v", volumes, mounts, want)
			}
			endpoints, _, _ := unstructured.NestedSlice(find(t, objs, "ServiceMonitor").Object, "spec", "endpoints")
			if len(endpoints) != 1 || !reflect.DeepEqual(endpoints[0], c.wantEndpoint) {
				t.Errorf("ServiceMonitor endpoints %v, want [%v]", endpoints, c.wantEndpoint)
			}
		})
	}
}

// TestNetworkPolicyValues: the NetworkPolicy takes the namespace Prometheus runs
// in (by name, or a label selector that replaces the name) and the API server's
// addresses and ports from the values, and is left out with
// networkPolicy.enabled=false.
func TestNetworkPolicyValues(t *testing.T) {
	objs := helmTemplate(t, "--set-json",
		`networkPolicy={"enabled":true,"metricsNamespaceSelector":{"team":"observability"},"apiServer":{"cidrs":["10.0.0.10/32","10.0.0.11/32"],"ports":[6443]}}`)
	policy := find(t, objs, "NetworkPolicy")
	ingress, _, _ := unstructured.NestedSlice(policy.Object, "spec", "ingress")
	from, _, _ := unstructured.NestedSlice(ingress[0].(map[string]any), "from")
	labels, _, _ := unstructured.NestedStringMap(from[0].(map[string]any), "namespaceSelector", "matchLabels")
	if !reflect.DeepEqual(labels, map[string]string{"team": "observability"}) {
		t.Errorf("ingress from namespaces %v, want team=observability", labels)
	}
	egress, _, _ := unstructured.NestedSlice(policy.Object, "spec", "egress")
	apiServer := egress[0].(map[string]any)
	want := map[string]any{
		"to":    []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.0.0.10/32"}}, map[string]any{"ipBlock": map[string]any{"cidr": "10.0.0.11/32"}}},
		"ports": []any{map[string]any{"protocol": "TCP", "port": int64(6443)}},
	}
	if got, want := mustJSON(t, apiServer), mustJSON(t, want); got != want {
		t.Errorf("egress to the API server %v, want %v", apiServer, want)
	}

	ns := find(t, helmTemplate(t, "--set", "networkPolicy.metricsNamespace=prometheus"), "NetworkPolicy")
	ingress, _, _ = unstructured.NestedSlice(ns.Object, "spec", "ingress")
	from, _, _ = unstructured.NestedSlice(ingress[0].(map[string]any), "from")
	labels, _, _ = unstructured.NestedStringMap(from[0].(map[string]any), "namespaceSelector", "matchLabels")
	if !reflect.DeepEqual(labels, map[string]string{"kubernetes.io/metadata.name": "prometheus"}) {
		t.Errorf("ingress from namespaces %v, want the namespace prometheus", labels)
	}

	for _, o := range helmTemplate(t, "--set", "networkPolicy.enabled=false") {
		if o.GetKind() == "NetworkPolicy" {
			t.Errorf("networkPolicy.enabled=false renders NetworkPolicy %s", o.GetName())
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
