package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// windowFlag is this controller's flag whose value the window charts put on
// their x axis.
const windowFlag = "--status-min-batch-window"

// windowPoint is what one run tells of the node status batch window's trade.
type windowPoint struct {
	Controller controllerKind
	Volumes    int
	Nodes      int
	Rate       rate
	// Window is this controller's --status-min-batch-window (0 if not given).
	Window time.Duration
	// WritesPerVolume is node status writes while attaching, per volume.
	WritesPerVolume float64
	// AttachedToStatusP50 is the median of status.attached → node status.
	AttachedToStatusP50 time.Duration
}

// windowOf is the last value flags give windowFlag, 0 if none.
func windowOf(flags []string) (time.Duration, error) {
	var window time.Duration
	for _, f := range flags {
		v, ok := strings.CutPrefix(f, windowFlag+"=")
		if !ok {
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", f, err)
		}
		window = d
	}
	return window, nil
}

// windowPoints reads the runs of saved results, each invocation's runs of this
// controller at the window its -this-flag gave.
func windowPoints(list []*Results) ([]windowPoint, error) {
	var points []windowPoint
	for _, rs := range list {
		window, err := windowOf(rs.ThisFlags)
		if err != nil {
			return nil, fmt.Errorf("results of %q: %w", rs.Command, err)
		}
		for _, r := range rs.Runs {
			latencies := make([]time.Duration, len(r.Attach.AttachedToNodeStatusMs))
			for i, v := range r.Attach.AttachedToNodeStatusMs {
				latencies[i] = time.Duration(math.Round(v * float64(time.Millisecond)))
			}
			p := windowPoint{
				Controller:          controllerKind(r.Controller),
				Volumes:             r.Volumes,
				Nodes:               r.Nodes,
				Rate:                rate{QPS: r.QPS, Burst: r.Burst},
				AttachedToStatusP50: percentile(latencies, 0.5),
			}
			if r.Volumes > 0 {
				p.WritesPerVolume = float64(r.Attach.NodeStatusWrites) / float64(r.Volumes)
			}
			if p.Controller == thisController {
				p.Window = window
			}
			points = append(points, p)
		}
	}
	return points, nil
}

// windowFigure is a figure drawn against the window.
type windowFigure struct {
	file, title, yLabel string
	value               func(windowPoint) float64
}

var windowFigures = []windowFigure{
	{
		file:   "window-writes",
		title:  "Node status writes per volume while attaching",
		yLabel: "writes per volume",
		value:  func(p windowPoint) float64 { return p.WritesPerVolume },
	},
	{
		file:   "window-latency",
		title:  "status.attached → node status, p50",
		yLabel: "p50 (s)",
		value:  func(p windowPoint) float64 { return p.AttachedToStatusP50.Seconds() },
	},
}

// drawWindowCharts draws, for each workload size and rate of the saved results,
// each window figure of this controller against its minimum batch window, with
// upstream's median over its runs as a level line, into dir, and writes a
// Markdown image line per chart to w.
func drawWindowCharts(w io.Writer, dir string, resultsPaths []string) error {
	var list []*Results
	for _, p := range resultsPaths {
		rs, err := readResults(p)
		if err != nil {
			return err
		}
		list = append(list, rs)
	}
	points, err := windowPoints(list)
	if err != nil {
		return err
	}
	charts, err := writeWindowCharts(dir, points)
	if err != nil {
		return err
	}
	printCharts(w, dir, charts)
	return nil
}

// windowWorkload is one size at one rate.
type windowWorkload struct {
	volumes, nodes int
	rate           rate
}

func writeWindowCharts(dir string, points []windowPoint) ([]chart, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating charts directory: %w", err)
	}
	var workloads []windowWorkload
	for _, p := range points {
		if wl := (windowWorkload{p.Volumes, p.Nodes, p.Rate}); p.Controller == thisController && !slices.Contains(workloads, wl) {
			workloads = append(workloads, wl)
		}
	}
	if len(workloads) == 0 {
		return nil, errors.New("no runs of this controller to draw")
	}
	var charts []chart
	for _, wl := range workloads {
		for _, f := range windowFigures {
			c := chart{
				File: fmt.Sprintf("%s-%d-volumes-%d-nodes-qps%g-burst%d.svg", f.file, wl.volumes, wl.nodes, wl.rate.QPS, wl.rate.Burst),
				Title: fmt.Sprintf("%s, %s volumes on %s nodes, %s", f.title, thousands(wl.volumes), thousands(wl.nodes),
					wl.rate),
			}
			p, err := windowPlot(c.Title, f, filterWindowPoints(points, wl))
			if err := saveChart(dir, c, p, err); err != nil {
				return nil, err
			}
			charts = append(charts, c)
		}
	}
	return charts, nil
}

func filterWindowPoints(points []windowPoint, wl windowWorkload) []windowPoint {
	var out []windowPoint
	for _, p := range points {
		if (windowWorkload{p.Volumes, p.Nodes, p.Rate}) == wl {
			out = append(out, p)
		}
	}
	return out
}

// windowPlot draws this controller's points joined in order of window, and
// upstream's median, if any ran, across the whole axis.
func windowPlot(title string, f windowFigure, points []windowPoint) (*plot.Plot, error) {
	p := newPlot(title, windowFlag+" (s)", f.yLabel)
	var ours plotter.XYs
	var theirs []float64
	for _, pt := range points {
		switch pt.Controller {
		case thisController:
			ours = append(ours, plotter.XY{X: pt.Window.Seconds(), Y: f.value(pt)})
		case upstreamController:
			theirs = append(theirs, f.value(pt))
		}
	}
	slices.SortFunc(ours, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
	hi := 0.0
	for _, xy := range ours {
		hi = max(hi, xy.Y)
	}
	line, dots, err := plotter.NewLinePoints(ours)
	if err != nil {
		return nil, err
	}
	line.LineStyle = draw.LineStyle{Color: controllerColors[thisController], Width: vg.Points(1.5)}
	dots.GlyphStyle = draw.GlyphStyle{Color: controllerColors[thisController], Radius: vg.Points(3), Shape: controllerGlyphs[thisController]}
	p.Add(line, dots)
	p.Legend.Add(string(thisController), line, dots)
	right := max(ours[len(ours)-1].X, 1) * 1.05
	if len(theirs) > 0 {
		level := median(theirs)
		hi = max(hi, level)
		ref, err := plotter.NewLine(plotter.XYs{{X: 0, Y: level}, {X: right, Y: level}})
		if err != nil {
			return nil, err
		}
		ref.LineStyle = draw.LineStyle{Color: controllerColors[upstreamController], Width: vg.Points(1.5), Dashes: []vg.Length{vg.Points(6), vg.Points(3)}}
		p.Add(ref)
		name := string(upstreamController)
		if len(theirs) > 1 {
			name += fmt.Sprintf(" (median of %d runs)", len(theirs))
		}
		p.Legend.Add(name, ref)
	}
	p.X.Min, p.X.Max = 0, right
	p.X.Tick.Marker = linearTicks{}
	p.Y.Min, p.Y.Max = 0, max(hi, 0.1)/(1-legendShare)
	p.Y.Tick.Marker = linearTicks{}
	return p, nil
}
