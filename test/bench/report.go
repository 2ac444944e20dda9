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

func (r *result) requestsPerVolume(phases ...phase) float64 {
	n := 0
	for _, p := range phases {
		n += r.requests[p].Total()
	}
	return float64(n) / float64(r.cfg.Volumes)
}

// figure is one row of the main table.
type figure struct {
	name   string
	format string
	value  func(*result) float64
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

var figures = []figure{
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
	{"attach: pods with a SuccessfulAttachVolume event (%)", "%.0f", func(r *result) float64 { return r.attachEventShare() * 100 }},
	{"steady: CPU while idle (s)", "%.2f", func(r *result) float64 { return r.idleCPU.Seconds() }},
	{"steady: peak RSS (MiB)", "%.0f", func(r *result) float64 { return float64(r.peakRSS) / (1 << 20) }},
	{"steady: API requests while idle", "%.0f", func(r *result) float64 { return float64(r.requests[idlePhase].Total()) }},
	{"fail-over: lease duration (s)", "%.1f", func(r *result) float64 { return r.cfg.Lease.Duration.Seconds() }},
	{"fail-over: leader killed → other replica holds the Lease (s)", "%.2f", func(r *result) float64 { return r.newLeader.Seconds() }},
	{"fail-over: leader killed → every moved volume on its new node (s)", "%.2f", func(r *result) float64 { return r.allMoved.Seconds() }},
	{"fail-over: other replica holds the Lease → every moved volume on its new node (s)", "%.2f", func(r *result) float64 { return (r.allMoved - r.newLeader).Seconds() }},
	{"fail-over: leader killed → moved volume on its new node p50 (s)", "%.2f", func(r *result) float64 { return percentile(r.moveTimes, .5).Seconds() }},
	{"start-up: process start → probe's VolumeAttachment (s)", "%.2f", func(r *result) float64 { return r.startupToVA.Seconds() }},
	{"start-up: process start → probe in node status (s)", "%.2f", func(r *result) float64 { return r.startupToStatus.Seconds() }},
	{"start-up: VolumeAttachments deleted", "%.0f", func(r *result) float64 { return float64(r.startupVADeletes) }},
	{"start-up: status writes to nodes other than the probe's", "%.0f", func(r *result) float64 { return float64(r.startupOtherWrites) }},
	{"start-up: API requests", "%.0f", func(r *result) float64 { return float64(r.requests[startupPhase].Total()) }},
	{"churn: all VolumeAttachments gone (s)", "%.2f", func(r *result) float64 { return r.allVAsGone.Seconds() }},
	{"churn: all node statuses empty (s)", "%.2f", func(r *result) float64 { return r.allNodesEmpty.Seconds() }},
	{"API requests per volume: attach", "%.2f", func(r *result) float64 { return r.requestsPerVolume(attachPhase) }},
	{"API requests per volume: idle", "%.2f", func(r *result) float64 { return r.requestsPerVolume(idlePhase) }},
	{"API requests per volume: churn", "%.2f", func(r *result) float64 { return r.requestsPerVolume(churnPhase) }},
	{"API requests per volume: attach + idle + churn", "%.2f", func(r *result) float64 {
		return r.requestsPerVolume(attachPhase, idlePhase, churnPhase)
	}},
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
		for _, f := range figures {
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

func cell(f figure, r *result) string {
	if r == nil {
		return "–"
	}
	return fmt.Sprintf(f.format, f.value(r))
}

func ratio(f figure, ours, theirs *result) string {
	if ours == nil || theirs == nil || f.value(theirs) == 0 {
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
