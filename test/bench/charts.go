package main

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"image/color"
	"io"
	"maps"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// chartRun is what the charts show of one run. chartRunsOf is the one place that
// reads result's fields, so that charts can be drawn from other sources of the
// same figures.
type chartRun struct {
	Controller controllerKind
	Rate       rate
	Volumes    int
	Nodes      int
	// Idle is the length of the idle period IdleCPU was measured over.
	Idle time.Duration
	// PodToStatus is, per volume, from its pod first seen to the volume first seen
	// in its node's status.volumesAttached.
	PodToStatus []time.Duration
	IdleCPU     time.Duration
	// PeakRSS is in bytes.
	PeakRSS int64
	// RequestsPerVolume is the controller's API requests over the attach, idle and
	// churn phases, per volume.
	RequestsPerVolume float64
}

// chartRunsOf reads the runs this invocation measured.
func chartRunsOf(list []*result) []chartRun {
	runs := make([]chartRun, 0, len(list))
	for _, r := range list {
		runs = append(runs, chartRun{
			Controller:        r.cfg.Controller,
			Rate:              r.cfg.Rate,
			Volumes:           r.cfg.Volumes,
			Nodes:             r.cfg.Nodes,
			Idle:              r.cfg.Idle,
			PodToStatus:       r.podToStatus,
			IdleCPU:           r.idleCPU,
			PeakRSS:           r.peakRSS,
			RequestsPerVolume: r.requestsPerVolume(attachPhase, idlePhase, churnPhase),
		})
	}
	return runs
}

// chartRunsFromResults reads the runs of a results.json.
func chartRunsFromResults(rs *Results) []chartRun {
	runs := make([]chartRun, 0, len(rs.Runs))
	for _, r := range rs.Runs {
		latencies := make([]time.Duration, len(r.Attach.PodToNodeStatusMs))
		for i, v := range r.Attach.PodToNodeStatusMs {
			latencies[i] = time.Duration(math.Round(v * float64(time.Millisecond)))
		}
		runs = append(runs, chartRun{
			Controller:        controllerKind(r.Controller),
			Rate:              rate{QPS: r.QPS, Burst: r.Burst},
			Volumes:           r.Volumes,
			Nodes:             r.Nodes,
			Idle:              fromSeconds(r.Steady.IdleSeconds),
			PodToStatus:       latencies,
			IdleCPU:           fromSeconds(r.Steady.CPUSeconds),
			PeakRSS:           r.Steady.PeakRSSBytes,
			RequestsPerVolume: r.RequestsPerVolume["attach+idle+churn"],
		})
	}
	return runs
}

func fromSeconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }

// drawCharts writes the charts of runs to dir and a Markdown line per chart to w,
// an image linking to dir as given.
func drawCharts(w io.Writer, dir string, runs []chartRun) error {
	charts, err := writeCharts(dir, runs)
	if err != nil {
		return err
	}
	printCharts(w, dir, charts)
	return nil
}

// printCharts writes a Markdown image line per chart, linking to dir as given.
func printCharts(w io.Writer, dir string, charts []chart) {
	for _, c := range charts {
		fmt.Fprintf(w, "![%s](%s)\n", c.Title, path.Join(filepath.ToSlash(dir), c.File))
	}
}

// saveChart draws c's plot, if p could be made, into dir.
func saveChart(dir string, c chart, p *plot.Plot, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", c.File, err)
	}
	return saveSVG(p, filepath.Join(dir, c.File))
}

// redrawCharts draws the charts of a saved results.json, by default beside it.
func redrawCharts(w io.Writer, resultsPath, dir string) error {
	rs, err := readResults(resultsPath)
	if err != nil {
		return err
	}
	if dir == "" {
		dir = filepath.Dir(resultsPath)
	}
	return drawCharts(w, dir, chartRunsFromResults(rs))
}

// chart is an SVG file written by writeCharts.
type chart struct {
	// File is the file's name in the charts directory.
	File  string
	Title string
}

const (
	chartWidth  = 7 * vg.Inch
	chartHeight = 4.5 * vg.Inch
	chartMargin = 4
	// chartMarginRight leaves room for the last tick label, which the plot's
	// layout does not count on axes of logarithms.
	chartMarginRight = 12
	// cdfPoints bounds the points of one latency line: above it, the line goes
	// through evenly spaced quantiles rather than through every volume.
	cdfPoints = 250
	// cpuTick is the resolution of /proc/<pid>/stat's CPU times (USER_HZ is 100 on
	// Linux): a log-scale axis shows an idle CPU of 0 at this value.
	cpuTick = 10 * time.Millisecond
	// legendShare is the fraction of a plot's height kept free above the data for
	// the legend.
	legendShare = 0.27
)

var (
	controllerColors = map[controllerKind]color.Color{
		thisController:     color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // blue
		upstreamController: color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, // orange
	}
	controllerGlyphs = map[controllerKind]draw.GlyphDrawer{
		thisController:     draw.CircleGlyph{},
		upstreamController: draw.SquareGlyph{},
	}
	// nodeGlyphs tell numbers of nodes apart when one number of volumes ran on
	// several.
	nodeGlyphs = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.TriangleGlyph{}, draw.SquareGlyph{}, draw.CrossGlyph{}}
	// rateDashes tell the rates apart, in the order they were run.
	rateDashes = [][]vg.Length{nil, {vg.Points(6), vg.Points(3)}, {vg.Points(2), vg.Points(2)}, {vg.Points(8), vg.Points(2), vg.Points(2), vg.Points(2)}}
	gridColor  = color.Gray{Y: 0xdd}
	chartFont  = font.Font{Typeface: "Liberation", Variant: "Sans"}
	// fontFamilies is the SVG style that names chartFont and its stand-ins.
	fontFamilies = "font-family:'Liberation Sans',Arial,Helvetica,sans-serif;"
)

// writeCharts draws, into dir, the distribution of pod → node status latency of
// every run for each workload size, and idle CPU, peak RSS and API requests per
// volume against the number of volumes. It returns the charts in the order a
// report shows them.
func writeCharts(dir string, runs []chartRun) ([]chart, error) {
	if len(runs) == 0 {
		return nil, errors.New("no runs to draw")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating charts directory: %w", err)
	}
	rates := ratesInOrder(runs)
	var charts []chart
	for _, size := range sizesOf(runs) {
		c := chart{
			File:  fmt.Sprintf("latency-%d-volumes-%d-nodes.svg", size.volumes, size.nodes),
			Title: fmt.Sprintf("Pod → node status latency, %s volumes on %s nodes", thousands(size.volumes), thousands(size.nodes)),
		}
		p, err := latencyPlot(c.Title, filterRuns(runs, func(r chartRun) bool {
			return r.Volumes == size.volumes && r.Nodes == size.nodes
		}), rates)
		if err := saveChart(dir, c, p, err); err != nil {
			return nil, err
		}
		charts = append(charts, c)
	}
	for _, f := range scaleFigures(runs) {
		c := chart{File: f.file + ".svg", Title: f.title}
		if nodes := nodeCounts(runs); len(nodes) == 1 {
			c.Title += fmt.Sprintf(", %s nodes", thousands(nodes[0]))
		}
		p, err := scalePlot(c.Title, f, runs, rates)
		if err := saveChart(dir, c, p, err); err != nil {
			return nil, err
		}
		charts = append(charts, c)
	}
	return charts, nil
}

// latencyPlot draws the cumulative distribution of pod → node status latency, one
// line per controller and rate.
func latencyPlot(title string, runs []chartRun, rates []rate) (*plot.Plot, error) {
	p := newPlot(title,
		"pod first seen → volume in its node's status.volumesAttached (s, log scale)",
		"fraction of volumes")
	lo, hi := math.Inf(1), 0.0
	for _, r := range runs {
		for _, d := range r.PodToStatus {
			s := max(d, time.Millisecond).Seconds()
			lo, hi = min(lo, s), max(hi, s)
		}
	}
	if hi == 0 {
		return nil, errors.New("no latencies to draw")
	}
	for _, r := range runs {
		if len(r.PodToStatus) == 0 {
			continue
		}
		line, err := plotter.NewLine(log10X(cdf(r.PodToStatus)))
		if err != nil {
			return nil, fmt.Errorf("%s controller at %s: %w", r.Controller, r.Rate, err)
		}
		line.StepStyle = plotter.PostStep
		styleLine(&line.LineStyle, r.Controller, r.Rate, rates)
		p.Add(line)
		p.Legend.Add(seriesName(r.Controller, r.Rate), line)
	}
	p.X.Min, p.X.Max = math.Log10(roundDown125(lo)), math.Log10(roundUp125(hi))
	p.X.Tick.Marker = logTicks{}
	p.Y.Min, p.Y.Max = 0, 1+legendShare/(1-legendShare)
	p.Y.Tick.Marker = plot.ConstantTicks{
		{Value: 0, Label: "0"}, {Value: 0.25, Label: "0.25"}, {Value: 0.5, Label: "0.5"},
		{Value: 0.75, Label: "0.75"}, {Value: 0.9, Label: "0.9"}, {Value: 1, Label: "1"},
	}
	return p, nil
}

// cdf returns the points of the empirical distribution of latencies, in seconds:
// the fraction of volumes at or below each latency, starting from 0. Above
// cdfPoints volumes it keeps cdfPoints evenly spaced quantiles.
func cdf(latencies []time.Duration) plotter.XYs {
	sorted := slices.Sorted(slices.Values(latencies))
	n := min(len(sorted), cdfPoints)
	seconds := func(d time.Duration) float64 { return max(d, time.Millisecond).Seconds() }
	xys := plotter.XYs{{X: seconds(sorted[0]), Y: 0}}
	for k := 1; k <= n; k++ {
		q := float64(k) / float64(n)
		xys = append(xys, plotter.XY{X: seconds(percentile(sorted, q)), Y: q})
	}
	return xys
}

// scaleFigure is a figure drawn against the number of volumes.
type scaleFigure struct {
	file, title, yLabel string
	value               func(chartRun) float64
	// logY draws the y axis on a log scale, values below floor at floor.
	logY  bool
	floor float64
}

func scaleFigures(runs []chartRun) []scaleFigure {
	idle := runs[0].Idle
	return []scaleFigure{
		{
			file:   "idle-cpu",
			title:  fmt.Sprintf("CPU while idle for %s s with every volume attached", secondsText(idle)),
			yLabel: fmt.Sprintf("CPU time (s, log scale; 0 shown at %s)", secondsText(cpuTick)),
			value:  func(r chartRun) float64 { return r.IdleCPU.Seconds() },
			logY:   true,
			floor:  cpuTick.Seconds(),
		},
		{
			file:   "peak-rss",
			title:  "Peak RSS",
			yLabel: "VmHWM after the idle period (MiB)",
			value:  func(r chartRun) float64 { return float64(r.PeakRSS) / (1 << 20) },
		},
		{
			file:   "requests-per-volume",
			title:  "API requests per volume, attach + idle + churn",
			yLabel: "requests per volume",
			value:  func(r chartRun) float64 { return r.RequestsPerVolume },
		},
	}
}

// scalePlot draws a figure against the number of volumes, one line per
// controller and rate. When the runs put one number of volumes on several numbers
// of nodes, it draws a line per number of nodes too, told apart by its points;
// otherwise the number of nodes, if not the same for all, labels each number of
// volumes.
func scalePlot(title string, f scaleFigure, runs []chartRun, rates []rate) (*plot.Plot, error) {
	p := newPlot(title, "volumes, one pod each (log scale)", f.yLabel)
	nodesByVolumes := map[int]int{}
	split := false
	for _, r := range runs {
		if n, ok := nodesByVolumes[r.Volumes]; ok && n != r.Nodes {
			split = true
		}
		nodesByVolumes[r.Volumes] = r.Nodes
	}
	lineNodes := []int{0} // 0: every number of nodes
	if split {
		lineNodes = nodeCounts(runs)
	}
	volumes := map[int]bool{}
	hi := 0.0
	for _, controller := range []controllerKind{thisController, upstreamController} {
		for _, rt := range rates {
			for i, nodes := range lineNodes {
				name, glyph := seriesName(controller, rt), controllerGlyphs[controller]
				if split {
					name += fmt.Sprintf(", %s nodes", thousands(nodes))
					glyph = nodeGlyphs[i%len(nodeGlyphs)]
				}
				series := filterRuns(runs, func(r chartRun) bool {
					return r.Controller == controller && r.Rate == rt && (nodes == 0 || r.Nodes == nodes)
				})
				if len(series) == 0 {
					continue
				}
				slices.SortFunc(series, func(a, b chartRun) int { return cmp.Compare(a.Volumes, b.Volumes) })
				var xys plotter.XYs
				for _, r := range series {
					y := f.value(r)
					if f.logY {
						y = max(y, f.floor)
					}
					xys = append(xys, plotter.XY{X: math.Log10(float64(r.Volumes)), Y: y})
					volumes[r.Volumes] = true
					hi = max(hi, y)
				}
				if f.logY {
					xys = log10Y(xys)
				}
				line, points, err := plotter.NewLinePoints(xys)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", name, err)
				}
				styleLine(&line.LineStyle, controller, rt, rates)
				points.GlyphStyle = draw.GlyphStyle{Color: controllerColors[controller], Radius: vg.Points(3), Shape: glyph}
				p.Add(line, points)
				p.Legend.Add(name, line, points)
			}
		}
	}
	sizes := slices.Sorted(maps.Keys(volumes))
	p.X.Min, p.X.Max = math.Log10(float64(sizes[0])/1.5), math.Log10(float64(sizes[len(sizes)-1])*1.5)
	labelNodes := !split && len(nodeCounts(runs)) > 1
	var ticks plot.ConstantTicks
	for _, v := range sizes {
		label := thousands(v)
		if labelNodes {
			label += fmt.Sprintf("\non %s nodes", thousands(nodesByVolumes[v]))
		}
		ticks = append(ticks, plot.Tick{Value: math.Log10(float64(v)), Label: label})
	}
	p.X.Tick.Marker = ticks
	if f.logY {
		bottom, top := math.Log10(f.floor/2), math.Log10(roundUp125(max(hi, f.floor*10)))
		p.Y.Min, p.Y.Max = bottom, top+(top-bottom)*legendShare/(1-legendShare)
		p.Y.Tick.Marker = logTicks{}
	} else {
		p.Y.Min, p.Y.Max = 0, max(hi, 1)/(1-legendShare)
		p.Y.Tick.Marker = linearTicks{}
	}
	return p, nil
}

// newPlot is a plot with a grid, labelled axes and a legend at the top left.
func newPlot(title, xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font = font.From(chartFont, 13)
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	for _, axis := range []*plot.Axis{&p.X, &p.Y} {
		axis.Label.TextStyle.Font = font.From(chartFont, 11)
		axis.Tick.Label.Font = font.From(chartFont, 10)
	}
	p.Legend.TextStyle.Font = font.From(chartFont, 10)
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(8), vg.Points(-6)
	p.Legend.ThumbnailWidth = vg.Points(30)
	p.Legend.Padding = vg.Points(2)
	grid := plotter.NewGrid()
	grid.Vertical.Color, grid.Horizontal.Color = gridColor, gridColor
	p.Add(grid)
	return p
}

// styleLine gives a line its controller's colour and its rate's dashes.
func styleLine(s *draw.LineStyle, controller controllerKind, r rate, rates []rate) {
	s.Color = controllerColors[controller]
	s.Width = vg.Points(1.5)
	s.Dashes = rateDashes[slices.Index(rates, r)%len(rateDashes)]
}

func seriesName(controller controllerKind, r rate) string {
	return fmt.Sprintf("%s, QPS/burst %s", controller, r)
}

// Log-scale axes are linear axes of the values' logarithms, with logTicks: a
// plot.LogScale axis places its label at the arithmetic middle of its range, off
// to the side, and leaves room for it there.

func log10X(xys plotter.XYs) plotter.XYs {
	out := make(plotter.XYs, len(xys))
	for i, xy := range xys {
		out[i] = plotter.XY{X: math.Log10(xy.X), Y: xy.Y}
	}
	return out
}

func log10Y(xys plotter.XYs) plotter.XYs {
	out := make(plotter.XYs, len(xys))
	for i, xy := range xys {
		out[i] = plotter.XY{X: xy.X, Y: math.Log10(xy.Y)}
	}
	return out
}

// logTicks marks, on an axis of base-10 logarithms, every multiple of a power of
// ten, labelled with its value: 1, 2 and 5 times each power of ten when the axis
// spans up to four decades, only the powers of ten on a wider one.
type logTicks struct{}

func (logTicks) Ticks(logLo, logHi float64) []plot.Tick {
	lo, hi := math.Pow(10, logLo), math.Pow(10, logHi)
	wide := math.Log10(hi/lo) > 4
	var ticks []plot.Tick
	for e := int(math.Floor(math.Log10(lo))); e <= int(math.Ceil(math.Log10(hi))); e++ {
		for m := 1; m < 10; m++ {
			v := float64(m) * math.Pow10(e)
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: math.Log10(v)}
			if m == 1 || (!wide && (m == 2 || m == 5)) {
				t.Label = strconv.FormatFloat(v, 'f', max(-e, 0), 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// linearTicks labels about six round values, 1, 2 or 5 times a power of ten apart,
// on a linear axis.
type linearTicks struct{}

func (linearTicks) Ticks(lo, hi float64) []plot.Tick {
	step := roundUp125((hi - lo) / 6)
	scale := math.Pow10(max(-int(math.Floor(math.Log10(step))), 0))
	var ticks []plot.Tick
	for i := math.Ceil(lo / step); i*step <= hi; i++ {
		v := math.Round(i*step*scale) / scale
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	return ticks
}

// roundDown125 and roundUp125 round a positive value to the nearest 1, 2 or 5
// times a power of ten below or above it.
func roundDown125(v float64) float64 {
	e := math.Pow10(int(math.Floor(math.Log10(v))))
	for _, m := range []float64{5, 2, 1} {
		if m*e <= v*(1+1e-9) {
			return m * e
		}
	}
	return e
}

func roundUp125(v float64) float64 {
	e := math.Pow10(int(math.Floor(math.Log10(v))))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*e >= v*(1-1e-9) {
			return m * e
		}
	}
	return 10 * e
}

// saveSVG writes the plot as SVG. The text names Liberation Sans, which few
// viewers have: Arial and Helvetica, which have the same metrics, and any sans-serif
// font stand in for it.
func saveSVG(p *plot.Plot, file string) error {
	canvas := vgsvg.New(chartWidth, chartHeight)
	p.Draw(draw.Crop(draw.New(canvas), chartMargin, -chartMargin-chartMarginRight, chartMargin, -chartMargin))
	var svg bytes.Buffer
	if _, err := canvas.WriteTo(&svg); err != nil {
		return fmt.Errorf("drawing %s: %w", file, err)
	}
	out := bytes.ReplaceAll(svg.Bytes(), []byte("font-family:Liberation Sans;"), []byte(fontFamilies))
	if err := os.WriteFile(file, out, 0o644); err != nil {
		return fmt.Errorf("writing chart %s: %w", file, err)
	}
	return nil
}

// workloadSize is a number of volumes on a number of nodes.
type workloadSize struct{ volumes, nodes int }

func sizesOf(runs []chartRun) []workloadSize {
	var sizes []workloadSize
	for _, r := range runs {
		if s := (workloadSize{r.Volumes, r.Nodes}); !slices.Contains(sizes, s) {
			sizes = append(sizes, s)
		}
	}
	slices.SortFunc(sizes, func(a, b workloadSize) int {
		return cmp.Or(cmp.Compare(a.nodes, b.nodes), cmp.Compare(a.volumes, b.volumes))
	})
	return sizes
}

func nodeCounts(runs []chartRun) []int {
	var counts []int
	for _, s := range sizesOf(runs) {
		if !slices.Contains(counts, s.nodes) {
			counts = append(counts, s.nodes)
		}
	}
	return counts
}

// ratesInOrder returns the rates in the order the runs first used them.
func ratesInOrder(runs []chartRun) []rate {
	var rates []rate
	for _, r := range runs {
		if !slices.Contains(rates, r.Rate) {
			rates = append(rates, r.Rate)
		}
	}
	return rates
}

func filterRuns(runs []chartRun, keep func(chartRun) bool) []chartRun {
	var out []chartRun
	for _, r := range runs {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

func secondsText(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }

// thousands formats n with commas between groups of three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
