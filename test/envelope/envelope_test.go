package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"k8s.io/klog/v2/ktesting"
)

// TestSmallRun runs every phase on a small world, so that the harness keeps
// working: 300 pods on 10 nodes, two rounds of 100 attaches and detaches, a
// short idle window. Run with -v to see the table.
func TestSmallRun(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	s := suite{
		Pods:            []int{300},
		PodsPerNode:     30,
		Changes:         100,
		Rounds:          2,
		Idle:            time.Second,
		Timeout:         2 * time.Minute,
		ProfileDir:      t.TempDir(),
		KubeletWorkers:  4,
		AttacherWorkers: 16,
		Logger:          logger,
	}
	results, err := s.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	writeTable(&table, results)
	t.Log("\n" + table.String())
	if len(results) != 1 {
		t.Fatalf("%d results, want 1", len(results))
	}
	r := results[0]
	if r.Nodes != 10 {
		t.Errorf("%d nodes, want 10", r.Nodes)
	}
	if r.Ready <= 0 || r.FirstDecision < r.Ready || r.StartUp < r.FirstDecision {
		t.Errorf("start-up times out of order: ready %s, first decision %s, settled %s", r.Ready, r.FirstDecision, r.StartUp)
	}
	if r.Attach <= 0 || r.Detach <= 0 {
		t.Errorf("attach took %s, detach %s, want both measured", r.Attach, r.Detach)
	}
	if r.HeapPerVolume <= 0 || r.PeakHeap == 0 {
		t.Errorf("heap per volume %.0f bytes, peak %d bytes above the world's, want both positive", r.HeapPerVolume, r.PeakHeap)
	}
	for _, name := range []string{"cpu-300-pods-startup.pprof", "cpu-300-pods-attach-1.pprof", "cpu-300-pods-detach-2.pprof", "cpu-300-pods-idle.pprof", "heap-300-pods-settled.pprof"} {
		if _, err := os.Stat(filepath.Join(s.ProfileDir, name)); err != nil {
			t.Errorf("profile not written: %v", err)
		}
	}
	// About 0.1 s of the controller's CPU in all: ten samples or so.
	if cpu := r.StartUpCPU.add(r.AttachCPU).add(r.DetachCPU); cpu.Controller <= 0 {
		t.Errorf("no CPU attributed to the controller over start-up, attaches and detaches (%+v)", cpu)
	}
}

func TestAttribute(t *testing.T) {
	fn := func(names ...string) []*profile.Location {
		var locs []*profile.Location
		for _, n := range names {
			locs = append(locs, &profile.Location{Line: []profile.Line{{Function: &profile.Function{Name: n}}}})
		}
		return locs
	}
	controllerLabel := map[string][]string{componentLabel: {controllerName}}
	const (
		reconcile = "github.com/attachdetach-controller/attachdetach-controller/pkg/reconciler.(*Reconciler).sync"
		react     = "github.com/attachdetach-controller/attachdetach-controller/internal/fakeapi.(*Client).react"
		kubelet   = "github.com/attachdetach-controller/attachdetach-controller/internal/sim.(*Kubelet).syncNode"
	)
	tests := []struct {
		name    string
		samples []*profile.Sample
		want    cpuUse
	}{
		{
			name:    "the controller's own work",
			samples: []*profile.Sample{{Value: []int64{1, 10e6}, Label: controllerLabel, Location: fn("runtime.mallocgc", reconcile)}},
			want:    cpuUse{Controller: 10 * time.Millisecond},
		},
		{
			name:    "the fake API serving the controller",
			samples: []*profile.Sample{{Value: []int64{2, 20e6}, Label: controllerLabel, Location: fn("runtime.memmove", react, reconcile)}},
			want:    cpuUse{FakeAPI: 20 * time.Millisecond},
		},
		{
			name:    "a typed fake client",
			samples: []*profile.Sample{{Value: []int64{1, 10e6}, Label: controllerLabel, Location: fn("k8s.io/client-go/kubernetes/typed/storage/v1/fake.(*FakeStorageV1).VolumeAttachments", reconcile)}},
			want:    cpuUse{FakeAPI: 10 * time.Millisecond},
		},
		{
			name:    "a simulated agent, unlabelled",
			samples: []*profile.Sample{{Value: []int64{3, 30e6}, Location: fn(kubelet)}},
			want:    cpuUse{Other: 30 * time.Millisecond},
		},
		{
			name: "the periodic pass, among others",
			samples: []*profile.Sample{
				{Value: []int64{1, 10e6}, Label: controllerLabel, Location: fn("runtime.mapaccess", resyncFunction)},
				{Value: []int64{1, 10e6}, Label: controllerLabel, Location: fn(reconcile)},
				{Value: []int64{1, 10e6}, Location: fn("runtime.gcBgMarkWorker")},
			},
			want: cpuUse{Controller: 20 * time.Millisecond, Other: 10 * time.Millisecond, Resync: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &profile.Profile{
				SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
				Sample:     tt.samples,
			}
			got, err := attribute(p)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("attribute() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestAttributeNeedsCPUSamples(t *testing.T) {
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "alloc_space", Unit: "bytes"}}}
	if _, err := attribute(p); err == nil {
		t.Error("attribute() of a heap profile: no error")
	}
}

func TestScaling(t *testing.T) {
	tests := []struct {
		name string
		got  float64
		want float64
	}{
		{"0.5 s over 500 attaches", perThousand(500*time.Millisecond, 500), 1},
		{"2 s over 4,000 detaches", perThousand(2*time.Second, 4000), 0.5},
		{"no operations", perThousand(time.Second, 0), 0},
		{"0.2 s over a 30 s window", perMinute(200*time.Millisecond, 30*time.Second), 0.4},
		{"no window", perMinute(time.Second, 0), 0},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

func TestParseSizes(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{in: "1000", want: []int{1000}},
		{in: "1000, 10000,150000", want: []int{1000, 10000, 150000}},
		{in: "0", wantErr: true},
		{in: "1000,", wantErr: true},
		{in: "1e3", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseSizes(tt.in)
		if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
			t.Errorf("parseSizes(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestNodesFor(t *testing.T) {
	s := suite{PodsPerNode: 30}
	for _, tt := range []struct{ pods, want int }{
		{150000, 5000},
		{50000, 1667},
		{1000, 34},
		{30, 1},
		{10, 1},
	} {
		if got := s.nodesFor(tt.pods); got != tt.want {
			t.Errorf("nodesFor(%d) = %d, want %d", tt.pods, got, tt.want)
		}
	}
}
