package main

import (
	"encoding/xml"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
)

// syntheticRuns are both controllers at two rates on two workload sizes, with
// latencies spread like the real ones: over seconds at 20/30, under one at 200/300.
func syntheticRuns() []chartRun {
	rng := rand.New(rand.NewPCG(1, 2))
	var runs []chartRun
	for _, volumes := range []int{100, 1000} {
		for _, r := range []rate{{QPS: 20, Burst: 30}, {QPS: 200, Burst: 300}} {
			for _, c := range []controllerKind{thisController, upstreamController} {
				spread := time.Duration(float64(volumes) / r.QPS * float64(time.Second))
				latencies := make([]time.Duration, volumes)
				for i := range latencies {
					latencies[i] = 20*time.Millisecond + time.Duration(rng.Int64N(int64(spread)))
				}
				run := chartRun{
					Controller: c, Rate: r, Volumes: volumes, Nodes: 50, Idle: time.Minute,
					PodToStatus: latencies, PeakRSS: int64(30+volumes/30) << 20, RequestsPerVolume: 4.5,
				}
				if c == upstreamController {
					run.IdleCPU = time.Duration(volumes) * 1600 * time.Microsecond
					run.PeakRSS *= 2
					run.RequestsPerVolume = 5.5
				}
				runs = append(runs, run)
			}
		}
	}
	return runs
}

func TestWriteCharts(t *testing.T) {
	dir := t.TempDir()
	charts, err := writeCharts(dir, syntheticRuns())
	if err != nil {
		t.Fatal(err)
	}
	series := []string{"this, QPS/burst 20/30", "upstream, QPS/burst 20/30", "this, QPS/burst 200/300", "upstream, QPS/burst 200/300"}
	want := []struct {
		file, title string
		texts       []string
	}{
		{"latency-100-volumes-50-nodes.svg", "Pod → node status latency, 100 volumes on 50 nodes", []string{"fraction of volumes", "status.volumesAttached (s, log scale)"}},
		{"latency-1000-volumes-50-nodes.svg", "Pod → node status latency, 1,000 volumes on 50 nodes", []string{"fraction of volumes"}},
		{"idle-cpu.svg", "CPU while idle for 60 s with every volume attached, 50 nodes", []string{"CPU time (s, log scale; 0 shown at 0.01)", "1,000"}},
		{"peak-rss.svg", "Peak RSS, 50 nodes", []string{"(MiB)", "1,000"}},
		{"requests-per-volume.svg", "API requests per volume, attach + idle + churn, 50 nodes", []string{"requests per volume", "1,000"}},
	}
	if len(charts) != len(want) {
		t.Fatalf("wrote %d charts %v, want %d", len(charts), charts, len(want))
	}
	for i, w := range want {
		if charts[i] != (chart{File: w.file, Title: w.title}) {
			t.Errorf("chart %d is %+v, want %s titled %q", i, charts[i], w.file, w.title)
			continue
		}
		texts, err := svgTexts(filepath.Join(dir, w.file))
		if err != nil {
			t.Errorf("%s: %v", w.file, err)
			continue
		}
		for _, s := range append([]string{w.title}, append(w.texts, series...)...) {
			if !slices.ContainsFunc(texts, func(text string) bool { return strings.Contains(text, s) }) {
				t.Errorf("%s has no text %q; its texts: %q", w.file, s, texts)
			}
		}
	}
}

// svgTexts checks that the file is a well-formed SVG document and returns the
// contents of its text elements.
func svgTexts(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := xml.NewDecoder(f)
	var texts []string
	var root string
	inText := false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tok.Name.Local
			}
			inText = tok.Name.Local == "text"
		case xml.CharData:
			if inText {
				texts = append(texts, string(tok))
			}
		case xml.EndElement:
			inText = false
		}
	}
	if root != "svg" {
		return nil, errors.New("root element is " + root + ", want svg")
	}
	return texts, nil
}

// TestScaleChartsNodes: the charts against the number of volumes name the number
// of nodes of each point when it varies, and draw a line per number of nodes when
// one number of volumes ran on several.
func TestScaleChartsNodes(t *testing.T) {
	run := func(c controllerKind, volumes, nodes int) chartRun {
		return chartRun{
			Controller: c, Rate: rate{QPS: 200, Burst: 300}, Volumes: volumes, Nodes: nodes, Idle: time.Minute,
			PodToStatus: []time.Duration{time.Second}, PeakRSS: 50 << 20, RequestsPerVolume: 4,
		}
	}
	for _, tc := range []struct {
		name      string
		runs      []chartRun
		title     string
		texts     []string
		noTexts   []string
		latencies int
	}{
		{
			name:      "one number of nodes per number of volumes",
			runs:      []chartRun{run(thisController, 1000, 100), run(upstreamController, 1000, 100), run(thisController, 10000, 1000), run(upstreamController, 10000, 1000)},
			title:     "Peak RSS",
			texts:     []string{"on 100 nodes", "on 1,000 nodes", "this, QPS/burst 200/300", "upstream, QPS/burst 200/300"},
			noTexts:   []string{"200/300, 100 nodes"},
			latencies: 2,
		},
		{
			name:      "one number of volumes on two numbers of nodes",
			runs:      []chartRun{run(thisController, 100, 50), run(thisController, 1000, 50), run(thisController, 1000, 1000)},
			title:     "Peak RSS",
			texts:     []string{"this, QPS/burst 200/300, 50 nodes", "this, QPS/burst 200/300, 1,000 nodes"},
			noTexts:   []string{"on 50 nodes"},
			latencies: 3,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			charts, err := writeCharts(dir, tc.runs)
			if err != nil {
				t.Fatal(err)
			}
			if len(charts) != tc.latencies+3 {
				t.Fatalf("wrote %v, want %d latency charts and 3 others", charts, tc.latencies)
			}
			rss := charts[tc.latencies+1]
			if rss != (chart{File: "peak-rss.svg", Title: tc.title}) {
				t.Fatalf("chart %+v, want peak-rss.svg titled %q", rss, tc.title)
			}
			texts, err := svgTexts(filepath.Join(dir, rss.File))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.texts {
				if !slices.Contains(texts, s) {
					t.Errorf("no text %q; texts: %q", s, texts)
				}
			}
			for _, s := range tc.noTexts {
				if slices.ContainsFunc(texts, func(text string) bool { return strings.Contains(text, s) }) {
					t.Errorf("text %q drawn; texts: %q", s, texts)
				}
			}
		})
	}
}

func TestWriteChartsNeedsRuns(t *testing.T) {
	if _, err := writeCharts(t.TempDir(), nil); err == nil {
		t.Error("no error drawing no runs")
	}
}

func TestLogTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   []string
	}{
		{0.1, 2, []string{"0.1", "0.2", "0.5", "1", "2"}},
		{0.02, 50, []string{"0.02", "0.05", "0.1", "0.2", "0.5", "1", "2", "5", "10", "20", "50"}},
		{0.001, 100, []string{"0.001", "0.01", "0.1", "1", "10", "100"}},
	} {
		var labels []string
		for _, tick := range (logTicks{}).Ticks(math.Log10(tc.lo), math.Log10(tc.hi)) {
			if tick.Label != "" {
				labels = append(labels, tick.Label)
			}
		}
		if !slices.Equal(labels, tc.want) {
			t.Errorf("ticks from %g to %g labelled %q, want %q", tc.lo, tc.hi, labels, tc.want)
		}
	}
}

func TestLinearTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   []string
	}{
		{0, 8, []string{"0", "2", "4", "6", "8"}},
		{0, 163, []string{"0", "50", "100", "150"}},
		{0, 1.37, []string{"0", "0.5", "1"}},
		{0, 0.7, []string{"0", "0.2", "0.4", "0.6"}},
	} {
		var labels []string
		for _, tick := range (linearTicks{}).Ticks(tc.lo, tc.hi) {
			labels = append(labels, tick.Label)
		}
		if !slices.Equal(labels, tc.want) {
			t.Errorf("ticks from %g to %g labelled %q, want %q", tc.lo, tc.hi, labels, tc.want)
		}
	}
}

func TestRound125(t *testing.T) {
	for _, tc := range []struct{ v, down, up float64 }{
		{0.3, 0.2, 0.5},
		{1, 1, 1},
		{7, 5, 10},
		{56.35, 50, 100},
		{0.047, 0.02, 0.05},
	} {
		if got := roundDown125(tc.v); got != tc.down {
			t.Errorf("roundDown125(%g) = %g, want %g", tc.v, got, tc.down)
		}
		if got := roundUp125(tc.v); got != tc.up {
			t.Errorf("roundUp125(%g) = %g, want %g", tc.v, got, tc.up)
		}
	}
}

func TestCDF(t *testing.T) {
	small := cdf([]time.Duration{3 * time.Second, time.Second, 2 * time.Second, 4 * time.Second})
	if want := []float64{0, 0.25, 0.5, 0.75, 1}; !slices.Equal(ys(small), want) || small[0].X != 1 || small[4].X != 4 {
		t.Errorf("cdf of 1..4 s = %v, want a step at each second to %v", small, want)
	}
	many := make([]time.Duration, 10*cdfPoints)
	for i := range many {
		many[i] = time.Duration(i+1) * time.Millisecond
	}
	if got := cdf(many); len(got) != cdfPoints+1 || got[len(got)-1].X != many[len(many)-1].Seconds() {
		t.Errorf("cdf of %d latencies has %d points ending at %v, want %d ending at the largest", len(many), len(got), got[len(got)-1], cdfPoints+1)
	}
}

func ys(xys plotter.XYs) []float64 {
	var out []float64
	for _, xy := range xys {
		out = append(out, xy.Y)
	}
	return out
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{5: "5", 100: "100", 1000: "1,000", 50000: "50,000", 1234567: "1,234,567"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestRedrawCharts(t *testing.T) {
	runs := syntheticRuns()
	saved := &Results{}
	for _, r := range runs {
		latencies := make([]float64, len(r.PodToStatus))
		for i, d := range r.PodToStatus {
			latencies[i] = ms(d)
		}
		saved.Runs = append(saved.Runs, RunResults{
			Controller: string(r.Controller), Volumes: r.Volumes, Nodes: r.Nodes, QPS: r.Rate.QPS, Burst: r.Rate.Burst,
			Attach:            AttachResults{PodToNodeStatusMs: latencies},
			Steady:            SteadyResults{IdleSeconds: r.Idle.Seconds(), CPUSeconds: r.IdleCPU.Seconds(), PeakRSSBytes: r.PeakRSS},
			RequestsPerVolume: map[string]float64{"attach+idle+churn": r.RequestsPerVolume},
		})
	}
	dir := t.TempDir()
	file := filepath.Join(dir, resultsFile)
	if err := writeResults(file, saved); err != nil {
		t.Fatal(err)
	}
	read, err := readResults(file)
	if err != nil {
		t.Fatal(err)
	}
	if got := chartRunsFromResults(read); !reflect.DeepEqual(got, runs) {
		t.Errorf("runs read back from %s differ from those saved:\n%+v\nwant\n%+v", resultsFile, got, runs)
	}

	var markdown strings.Builder
	if err := redrawCharts(&markdown, file, ""); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(markdown.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("printed %q, want a line per chart", lines)
	}
	want := "![Pod → node status latency, 100 volumes on 50 nodes](" + filepath.ToSlash(dir) + "/latency-100-volumes-50-nodes.svg)"
	if lines[0] != want {
		t.Errorf("first line %q, want %q", lines[0], want)
	}
	for _, name := range []string{"latency-100-volumes-50-nodes.svg", "requests-per-volume.svg"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("chart not drawn beside %s: %v", resultsFile, err)
		}
	}
}

func TestChartRunsOf(t *testing.T) {
	user := thisController.userName()
	res := &result{
		cfg:         runConfig{Controller: thisController, Rate: rate{QPS: 20, Burst: 30}, Volumes: 10, Nodes: 5, Idle: time.Minute},
		podToStatus: []time.Duration{time.Second},
		idleCPU:     20 * time.Millisecond,
		peakRSS:     1 << 20,
	}
	res.requests[attachPhase] = testenv.RequestCounts{{User: user, Verb: "create", Resource: "volumeattachments"}: 10}
	res.requests[idlePhase] = testenv.RequestCounts{}
	res.requests[churnPhase] = testenv.RequestCounts{{User: user, Verb: "delete", Resource: "volumeattachments"}: 10, {User: user, Verb: "patch", Resource: "nodes/status"}: 5}
	want := chartRun{
		Controller: thisController, Rate: rate{QPS: 20, Burst: 30}, Volumes: 10, Nodes: 5, Idle: time.Minute,
		PodToStatus: []time.Duration{time.Second}, IdleCPU: 20 * time.Millisecond, PeakRSS: 1 << 20, RequestsPerVolume: 2.5,
	}
	if got := chartRunsOf([]*result{res}); !reflect.DeepEqual(got, []chartRun{want}) {
		t.Errorf("chartRunsOf = %+v, want %+v", got, want)
	}
}
