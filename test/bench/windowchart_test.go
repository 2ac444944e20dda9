package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWindowOf(t *testing.T) {
	tests := []struct {
		name    string
		flags   []string
		want    time.Duration
		wantErr bool
	}{
		{name: "not given: the default", flags: []string{"--status-workers=4"}, want: 0},
		{name: "given", flags: []string{"--status-min-batch-window=250ms"}, want: 250 * time.Millisecond},
		{name: "given twice: the last, as the flag package takes it", flags: []string{"--status-min-batch-window=1s", "--status-min-batch-window=2s"}, want: 2 * time.Second},
		{name: "not a duration", flags: []string{"--status-min-batch-window=soon"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := windowOf(tc.flags)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("windowOf(%q) = %s, %v; want %s, error %t", tc.flags, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestDrawWindowCharts: three saved runs of this controller at three windows, one
// of them beside upstream, give two charts for the one workload, with the
// windows on the x axis and upstream's level in the legend.
func TestDrawWindowCharts(t *testing.T) {
	dir := t.TempDir()
	run := func(controller controllerKind, writes int, p50ms float64) RunResults {
		return RunResults{
			Controller: string(controller), Volumes: 1000, Nodes: 100, QPS: 200, Burst: 300,
			Attach: AttachResults{NodeStatusWrites: writes, AttachedToNodeStatusMs: []float64{p50ms / 2, p50ms, 2 * p50ms}},
		}
	}
	saved := []*Results{
		{Runs: []RunResults{run(thisController, 700, 300), run(upstreamController, 400, 2600)}},
		{ThisFlags: []string{"--status-min-batch-window=500ms"}, Runs: []RunResults{run(thisController, 450, 700)}},
		{ThisFlags: []string{"--status-min-batch-window=2s"}, Runs: []RunResults{run(thisController, 200, 1500)}},
	}
	var files []string
	for i, rs := range saved {
		file := filepath.Join(dir, string(rune('a'+i)), resultsFile)
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := writeResults(file, rs); err != nil {
			t.Fatal(err)
		}
		files = append(files, file)
	}
	list := make([]*Results, len(files))
	for i, f := range files {
		var err error
		if list[i], err = readResults(f); err != nil {
			t.Fatal(err)
		}
	}
	points, err := windowPoints(list)
	if err != nil {
		t.Fatal(err)
	}
	var windows []time.Duration
	for _, p := range points {
		if p.Controller == thisController {
			windows = append(windows, p.Window)
		}
	}
	if want := []time.Duration{0, 500 * time.Millisecond, 2 * time.Second}; len(windows) != 3 || windows[0] != want[0] || windows[1] != want[1] || windows[2] != want[2] {
		t.Errorf("windows read %v, want %v", windows, want)
	}
	if points[0].WritesPerVolume != 0.7 || points[0].AttachedToStatusP50 != 300*time.Millisecond {
		t.Errorf("first point %+v, want 0.7 writes per volume and a p50 of 300ms", points[0])
	}

	charts := filepath.Join(dir, "charts")
	var markdown strings.Builder
	if err := drawWindowCharts(&markdown, charts, files); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(markdown.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("printed %q, want a line per chart", lines)
	}
	for _, name := range []string{"window-writes-1000-volumes-100-nodes-qps200-burst300.svg", "window-latency-1000-volumes-100-nodes-qps200-burst300.svg"} {
		svg, err := os.ReadFile(filepath.Join(charts, name))
		if err != nil {
			t.Fatalf("chart not drawn: %v", err)
		}
		for _, text := range []string{"--status-min-batch-window (s)", "upstream", "this"} {
			if !strings.Contains(string(svg), text) {
				t.Errorf("%s has no %q", name, text)
			}
		}
	}
}

func TestDrawWindowChartsNeedsThisController(t *testing.T) {
	if _, err := writeWindowCharts(t.TempDir(), []windowPoint{{Controller: upstreamController, Volumes: 10}}); err == nil {
		t.Error("drew charts with no run of this controller")
	}
}
