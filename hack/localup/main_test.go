package main

import (
	"io"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/attachdetach-controller/attachdetach-controller/internal/localcluster/demo"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		args []string
		want config
	}{
		{nil, config{}},
		{[]string{"--no-demo", "--once"}, config{noDemo: true, once: true}},
		{[]string{"--local", "--", "--workers=2", "-v=5"}, config{local: true, controllerArgs: []string{"--workers=2", "-v=5"}}},
	}
	for _, tt := range tests {
		got, err := parseFlags(tt.args, io.Discard)
		if err != nil {
			t.Errorf("parseFlags(%q): %v", tt.args, err)
			continue
		}
		if got.noDemo != tt.want.noDemo || got.once != tt.want.once || got.local != tt.want.local || !slices.Equal(got.controllerArgs, tt.want.controllerArgs) {
			t.Errorf("parseFlags(%q) = %+v, want %+v", tt.args, got, tt.want)
		}
	}
	if _, err := parseFlags([]string{"--no-such-flag"}, io.Discard); err == nil {
		t.Errorf("parseFlags accepted an unknown flag")
	}
}

func TestPodManifest(t *testing.T) {
	var pod corev1.Pod
	if err := yaml.NewYAMLOrJSONDecoder(strings.NewReader(podManifest("node-3")), 4096).Decode(&pod); err != nil {
		t.Fatalf("decoding the example pod: %v", err)
	}
	if pod.Namespace != demo.DefaultNamespace || pod.Spec.NodeName != "node-3" || len(pod.Spec.Volumes) != 1 ||
		pod.Spec.Volumes[0].PersistentVolumeClaim == nil || pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != demo.ClaimRWO {
		t.Errorf("example pod %+v, want one on node-3 in namespace %s with claim %s", pod, demo.DefaultNamespace, demo.ClaimRWO)
	}
}

func TestCurrentServer(t *testing.T) {
	cfg := &clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{"c": {Server: "https://example:6443"}},
		Contexts: map[string]*clientcmdapi.Context{"ok": {Cluster: "c"}, "dangling": {Cluster: "missing"}},
	}
	tests := []struct {
		current, want string
		wantErr       bool
	}{
		{current: "ok", want: "https://example:6443"},
		{current: "dangling", wantErr: true},
		{current: "", wantErr: true},
	}
	for _, tt := range tests {
		cfg.CurrentContext = tt.current
		got, err := currentServer(cfg)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("currentServer with context %q = %q, %v; want %q, error %t", tt.current, got, err, tt.want, tt.wantErr)
		}
	}
}
