package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
)

func seconds(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

// percentile returns the nearest-rank p-th percentile (0 < p <= 1) of sorted values.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

// attachWrites is the number of requests attaching needs at the least: the
// VolumeAttachments created and the node status writes, as this run made them.
func (r *result) attachWrites() int {
	c := r.requests[attachPhase]
	return countWhere(c, "create", "volumeattachments") + countWhere(c, "patch", "nodes/status") + countWhere(c, "update", "nodes/status")
}

// countWhere counts the requests with a verb on a resource, whoever made them.
func countWhere(c testenv.RequestCounts, verb, resource string) int {
	n := 0
	for k, count := range c {
		if k.Verb == verb && k.Resource == resource {
			n += count
		}
	}
	return n
}

// requestFloor is the shortest time the client rate limit allows for the attach
// phase's writes: what the burst does not cover, at QPS.
func (r *result) requestFloor() time.Duration {
	over := max(r.attachWrites()-r.cfg.Rate.Burst, 0)
	return time.Duration(float64(over) / r.cfg.Rate.QPS * float64(time.Second))
}

// idealFloor is the request floor with one node status write per node that has
// volumes: the least any controller can do.
func (r *result) idealFloor() time.Duration {
	over := max(r.cfg.Volumes+min(r.cfg.Nodes, r.cfg.Volumes)-r.cfg.Rate.Burst, 0)
	return time.Duration(float64(over) / r.cfg.Rate.QPS * float64(time.Second))
}

// attachEventShare is the share of pods that got a SuccessfulAttachVolume event.
func (r *result) attachEventShare() float64 {
	return float64(r.podsWithEvent) / float64(r.cfg.Volumes)
}

// perThousand is CPU time spent on every volume, in seconds per 1,000 volumes.
func (r *result) perThousand(cpu time.Duration) float64 {
	return cpu.Seconds() * 1000 / float64(r.cfg.Volumes)
}

func (r *result) requestsPerVolume(phases ...phase) float64 {
	n := 0
	for _, p := range phases {
		n += r.requests[p].Total()
	}
	return float64(n) / float64(r.cfg.Volumes)
}

// figure is one row of the main table; its value is NaN where not measured.
type figure struct {
	name   string
	format string
	value  func(*result) float64
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// figuresFor are the rows of the main table with runs take-overs per take-over
// phase.
func figuresFor(runs int) []figure {
	out := slices.Clone(figuresBefore)
	out = append(out, takeoverFigures("fail-over", runs, func(r *result) []takeover { return r.failovers }, failoverFigures)...)
	out = append(out, takeoverFigures("hand-over", runs, func(r *result) []takeover { return r.handovers }, handoverFigures)...)
	return append(out, figuresAfter...)
}

// figuresBefore are the rows before the take-overs'.
var figuresBefore = []figure{
	{"attach: all VolumeAttachments exist (s)", "%.2f", func(r *result) float64 { return r.allVAs.Seconds() }},
	{"attach: all volumes in node status (s)", "%.2f", func(r *result) float64 { return r.allInStatus.Seconds() }},
	{"attach: ideal floor, (VAs + one write per node − burst)/QPS (s)", "%.2f", func(r *result) float64 { return r.idealFloor().Seconds() }},
	{"attach: request floor, (VAs + node status writes − burst)/QPS (s)", "%.2f", func(r *result) float64 { return r.requestFloor().Seconds() }},
	{"attach: VolumeAttachment creates + node status writes", "%.0f", func(r *result) float64 { return float64(r.attachWrites()) }},
	{"attach: pod → node status p50 (ms)", "%.0f", func(r *result) float64 { return ms(percentile(r.podToStatus, .5)) }},
	{"attach: pod → node status p90 (ms)", "%.0f", func(r *result) float64 { return ms(percentile(r.podToStatus, .9)) }},
	{"attach: pod → node status p99 (ms)", "%.0f", func(r *result) float64 { return ms(percentile(r.podToStatus, .99)) }},
	{"attach: pod → VolumeAttachment p50 (ms)", "%.0f", func(r *result) float64 { return ms(percentile(r.podToVA, .5)) }},
	{"attach: pod → VolumeAttachment p90 (ms)", "%.0f", func(r *result) float64 { return ms(percentile(r.podToVA, .9)) }},
	{"attach: pod → VolumeAttachment p99 (ms)", "%.0f", func(r *result) float64 { return ms(percentile(r.podToVA, .99)) }},
	{"attach: status.attached → node status p50 (ms)", "%.0f", func(r *result) float64 { return ms(percentile(r.attachedToStatus, .5)) }},
	{"attach: status.attached → node status p90 (ms)", "%.0f", func(r *result) float64 { return ms(percentile(r.attachedToStatus, .9)) }},
	{"attach: status.attached → node status p99 (ms)", "%.0f", func(r *result) float64 { return ms(percentile(r.attachedToStatus, .99)) }},
	{"attach: controller CPU per 1,000 attaches (s)", "%.2f", func(r *result) float64 { return r.perThousand(r.attachCPU) }},
	{"attach: pods with a SuccessfulAttachVolume event (%)", "%.0f", func(r *result) float64 { return r.attachEventShare() * 100 }},
	{"steady: CPU while idle (s)", "%.2f", func(r *result) float64 { return r.idleCPU.Seconds() }},
	{"steady: peak RSS (MiB)", "%.0f", func(r *result) float64 { return float64(r.peakRSS) / (1 << 20) }},
	{"steady: API requests while idle", "%.0f", func(r *result) float64 { return float64(r.requests[idlePhase].Total()) }},
	{"fail-over: lease duration (s)", "%.1f", func(r *result) float64 { return r.cfg.Lease.Duration.Seconds() }},
}

// figuresAfter are the rows after the take-overs'.
var figuresAfter = []figure{
	{"start-up: process start → probe's VolumeAttachment (s)", "%.2f", func(r *result) float64 { return r.startupToVA.Seconds() }},
	{"start-up: process start → informers synced, as its log says (s)", "%.2f", func(r *result) float64 { return r.startupSynced.Seconds() }},
	{"start-up: process start → probe in node status (s)", "%.2f", func(r *result) float64 { return r.startupToStatus.Seconds() }},
	{"start-up: VolumeAttachments deleted", "%.0f", func(r *result) float64 { return float64(r.startupVADeletes) }},
	{"start-up: status writes to nodes other than the probe's", "%.0f", func(r *result) float64 { return float64(r.startupOtherWrites) }},
	{"start-up: API requests", "%.0f", func(r *result) float64 { return float64(r.requests[startupPhase].Total()) }},
	{"churn: all VolumeAttachments gone (s)", "%.2f", func(r *result) float64 { return r.allVAsGone.Seconds() }},
	{"churn: all node statuses empty (s)", "%.2f", func(r *result) float64 { return r.allNodesEmpty.Seconds() }},
	{"churn: controller CPU per 1,000 detaches (s)", "%.2f", func(r *result) float64 { return r.perThousand(r.churnCPU) }},
	{"API requests per volume: attach", "%.2f", func(r *result) float64 { return r.requestsPerVolume(attachPhase) }},
	{"API requests per volume: idle", "%.2f", func(r *result) float64 { return r.requestsPerVolume(idlePhase) }},
	{"API requests per volume: churn", "%.2f", func(r *result) float64 { return r.requestsPerVolume(churnPhase) }},
	{"API requests per volume: attach + idle + churn", "%.2f", func(r *result) float64 {
		return r.requestsPerVolume(attachPhase, idlePhase, churnPhase)
	}},
}

// takeoverTime is a time of one take-over, false if it was not measured.
type takeoverTime func(takeover) (time.Duration, bool)

// takeoverFigure is a row, or a row per run, of a take-over phase.
type takeoverFigure struct {
	name string
	// perRun figures get a row for each run when there are several; every figure
	// gets a row with the median over the runs.
	perRun bool
	value  takeoverTime
}

func measured(f func(takeover) time.Duration) takeoverTime {
	return func(t takeover) (time.Duration, bool) { return f(t), true }
}

var (
	exitTime        = measured(func(t takeover) time.Duration { return t.exited })
	newLeaderTime   = measured(func(t takeover) time.Duration { return t.newLeader })
	allMovedTime    = measured(func(t takeover) time.Duration { return t.allMoved })
	leaseToAllMoved = measured(func(t takeover) time.Duration { return t.allMoved - t.newLeader })
	moveP50         = measured(func(t takeover) time.Duration { return percentile(t.moveTimes, .5) })
)

var failoverFigures = []takeoverFigure{
	{"leader killed → other replica holds the Lease", true, newLeaderTime},
	{"leader killed → new leader's first VolumeAttachment or node status write", true, takeover.firstWriteAfter},
	{"leader killed → every moved volume on its new node", true, allMovedTime},
	{"other replica holds the Lease → every moved volume on its new node", false, leaseToAllMoved},
	{"leader killed → moved volume on its new node p50", false, moveP50},
}

var handoverFigures = []takeoverFigure{
	{"leader sent SIGTERM → its process exited", false, exitTime},
	{"leader sent SIGTERM → other replica holds the Lease", true, newLeaderTime},
	{"leader sent SIGTERM → new leader's first VolumeAttachment or node status write", true, takeover.firstWriteAfter},
	{"leader sent SIGTERM → every moved volume on its new node", true, allMovedTime},
	{"other replica holds the Lease → every moved volume on its new node", false, leaseToAllMoved},
	{"leader sent SIGTERM → moved volume on its new node p50", false, moveP50},
}

// takeoverFigures are the rows of a take-over phase, in seconds: with one run a
// row per figure; with several, a row per run of the perRun figures and a row with
// the median over the runs of every figure.
func takeoverFigures(phase string, runs int, takeovers func(*result) []takeover, list []takeoverFigure) []figure {
	var out []figure
	for _, tf := range list {
		if runs > 1 && tf.perRun {
			for i := range runs {
				out = append(out, figure{fmt.Sprintf("%s: %s, run %d (s)", phase, tf.name, i+1), "%.2f", func(r *result) float64 {
					ts := takeovers(r)
					if i >= len(ts) {
						return math.NaN()
					}
					return tf.value.seconds(ts[i])
				}})
			}
		}
		name := fmt.Sprintf("%s: %s (s)", phase, tf.name)
		if runs > 1 {
			name = fmt.Sprintf("%s: %s, median of %d (s)", phase, tf.name, runs)
		}
		out = append(out, figure{name, "%.2f", func(r *result) float64 { return tf.value.median(takeovers(r)) }})
	}
	return out
}

// seconds is the time of a take-over in seconds, NaN if it was not measured.
func (f takeoverTime) seconds(t takeover) float64 {
	d, ok := f(t)
	if !ok {
		return math.NaN()
	}
	return d.Seconds()
}

// median is the time's median over the take-overs in seconds, NaN if none
// measured it.
func (f takeoverTime) median(takeovers []takeover) float64 {
	values := make([]float64, len(takeovers))
	for i, t := range takeovers {
		values[i] = f.seconds(t)
	}
	return median(values)
}

// median is the middle of the values that are not NaN, the mean of the two middle
// ones for an even count; NaN if there are none.
func median(values []float64) float64 {
	values = slices.DeleteFunc(slices.Clone(values), math.IsNaN)
	if len(values) == 0 {
		return math.NaN()
	}
	slices.Sort(values)
	n := len(values)
	if n%2 == 1 {
		return values[n/2]
	}
	return (values[n/2-1] + values[n/2]) / 2
}

// results indexes the results of a suite.
type results struct {
	suite suite
	byKey map[runKey]*result
}

type runKey struct {
	volumes    int
	rate       rate
	controller controllerKind
}

func newResults(s suite, list []*result) results {
	rs := results{suite: s, byKey: map[runKey]*result{}}
	for _, r := range list {
		rs.byKey[runKey{r.cfg.Volumes, r.cfg.Rate, r.cfg.Controller}] = r
	}
	return rs
}

// write prints, for each workload size, the figures of both controllers at every
// rate with their ratio, and the requests per volume by verb and resource.
func (rs results) write(w io.Writer) {
	for _, volumes := range rs.suite.Volumes {
		fmt.Fprintf(w, "### %d volumes on %d nodes\n\n", volumes, rs.suite.nodesFor(volumes))
		header := []string{"figure"}
		for _, r := range rs.suite.Rates {
			header = append(header, "this "+r.String(), "upstream "+r.String(), "ratio")
		}
		t := newTable(header...)
		for _, f := range figuresFor(rs.suite.FailoverRuns) {
			row := []string{f.name}
			for _, r := range rs.suite.Rates {
				ours := rs.byKey[runKey{volumes, r, thisController}]
				theirs := rs.byKey[runKey{volumes, r, upstreamController}]
				row = append(row, cell(f, ours), cell(f, theirs), ratio(f, ours, theirs))
			}
			t.add(row...)
		}
		t.write(w)
		for _, r := range rs.suite.Rates {
			fmt.Fprintf(w, "\nAPI requests per volume by verb and resource, %d volumes, QPS/burst %s:\n\n", volumes, r)
			rs.writeBreakdown(w, volumes, r)
		}
		fmt.Fprintln(w)
	}
}

// cell is a figure's value, "–" if it has none (NaN: not measured).
func cell(f figure, r *result) string {
	if r == nil || math.IsNaN(f.value(r)) {
		return "–"
	}
	return fmt.Sprintf(f.format, f.value(r))
}

func ratio(f figure, ours, theirs *result) string {
	if ours == nil || theirs == nil || f.value(theirs) == 0 || math.IsNaN(f.value(ours)) || math.IsNaN(f.value(theirs)) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", f.value(ours)/f.value(theirs))
}

// requestKind is a verb on a resource, whoever made the request.
type requestKind struct{ verb, resource string }

func (k requestKind) String() string {
	if k.resource == "" {
		return k.verb + " (non-resource URL)"
	}
	return k.verb + " " + k.resource
}

func byKind(counts testenv.RequestCounts) map[requestKind]int {
	out := map[requestKind]int{}
	for k, n := range counts {
		out[requestKind{k.Verb, k.Resource}] += n
	}
	return out
}

// breakdownPhases are the phases of the breakdown by verb and resource, and of its
// totals.
var breakdownPhases = []phase{attachPhase, idlePhase, churnPhase}

func (rs results) writeBreakdown(w io.Writer, volumes int, r rate) {
	controllers := []controllerKind{thisController, upstreamController}
	header := []string{"request"}
	counts := map[controllerKind][numPhases]map[requestKind]int{}
	kinds := map[requestKind]bool{}
	for _, c := range controllers {
		for _, p := range breakdownPhases {
			header = append(header, fmt.Sprintf("%s %s", c, p))
		}
		header = append(header, string(c)+" total")
		res := rs.byKey[runKey{volumes, r, c}]
		if res == nil {
			continue
		}
		var perPhase [numPhases]map[requestKind]int
		for _, p := range breakdownPhases {
			perPhase[p] = byKind(res.requests[p])
			for k := range perPhase[p] {
				kinds[k] = true
			}
		}
		counts[c] = perPhase
	}
	t := newTable(header...)
	sorted := slices.SortedFunc(maps.Keys(kinds), func(a, b requestKind) int {
		return cmp.Or(strings.Compare(a.resource, b.resource), strings.Compare(a.verb, b.verb))
	})
	perVolume := func(n int) string { return fmt.Sprintf("%.3f", float64(n)/float64(volumes)) }
	for _, k := range append(sorted, requestKind{}) {
		row := []string{k.String()}
		if k == (requestKind{}) {
			row[0] = "all requests"
		}
		for _, c := range controllers {
			perPhase, ok := counts[c]
			if !ok {
				row = append(row, slices.Repeat([]string{"–"}, len(breakdownPhases)+1)...)
				continue
			}
			total := 0
			for _, p := range breakdownPhases {
				n := perPhase[p][k]
				if k == (requestKind{}) {
					n = sum(perPhase[p])
				}
				total += n
				row = append(row, perVolume(n))
			}
			row = append(row, perVolume(total))
		}
		t.add(row...)
	}
	t.write(w)
}

func sum(m map[requestKind]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// table is a Markdown table, its columns padded so that it also reads as text.
type table struct {
	rows [][]string
}

func newTable(header ...string) *table { return &table{rows: [][]string{header}} }

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) {
	widths := make([]int, len(t.rows[0]))
	for _, row := range t.rows {
		for i, c := range row {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		for i, c := range cells {
			pad := strings.Repeat(" ", widths[i]-len([]rune(c)))
			if i == 0 {
				fmt.Fprintf(&b, "| %s%s ", c, pad)
			} else {
				fmt.Fprintf(&b, "| %s%s ", pad, c)
			}
		}
		fmt.Fprintln(w, b.String()+"|")
	}
	line(t.rows[0])
	sep := make([]string, len(widths))
	for i, n := range widths {
		if i == 0 {
			sep[i] = ":" + strings.Repeat("-", n-1)
		} else {
			sep[i] = strings.Repeat("-", n-1) + ":"
		}
	}
	line(sep)
	for _, row := range t.rows[1:] {
		line(row)
	}
}
