package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
)

// TestSmallRun runs the whole benchmark on a small workload so that the harness
// keeps working: 50 volumes on 10 nodes, a short idle period, a fail-over and a
// hand-over moving 10 pods each with a 3 s lease, one rate, both controllers, and
// draws its charts. Run with -v to see the table.
func TestSmallRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two control planes and both controllers")
	}
	s := suite{
		Volumes:         []int{50},
		Rates:           []rate{{QPS: 200, Burst: 300}},
		Controllers:     []controllerKind{thisController, upstreamController},
		Nodes:           10,
		Idle:            3 * time.Second,
		Moves:           10,
		FailoverRuns:    1,
		Lease:           leaseTimings{Duration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond},
		PhaseTimeout:    time.Minute,
		AttacherWorkers: 16,
		KubeletWorkers:  8,
		Clients:         16,
		Objects:         realisticObjects,
		Dir:             t.TempDir(),
		Progress:        logWriter{t},
	}
	list, err := s.run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	newResults(s, list).write(&table)
	t.Log("\n" + table.String())
	if _, err := writeCharts(t.TempDir(), chartRunsOf(list)); err != nil {
		t.Errorf("drawing the charts: %v", err)
	}

	for _, r := range list {
		created := r.requests[attachPhase][testenv.RequestKey{User: r.cfg.Controller.userName(), Verb: "create", Resource: "volumeattachments"}]
		deleted := r.requests[churnPhase][testenv.RequestKey{User: r.cfg.Controller.userName(), Verb: "delete", Resource: "volumeattachments"}]
		if created < r.cfg.Volumes || deleted < r.cfg.Volumes {
			t.Errorf("%s controller: the audit log shows %d VolumeAttachments created while attaching and %d deleted during churn, want at least %d each",
				r.cfg.Controller, created, deleted, r.cfg.Volumes)
		}
		for _, latencies := range [][]time.Duration{r.podToVA, r.attachedToStatus, r.podToStatus} {
			if len(latencies) != r.cfg.Volumes {
				t.Errorf("%s controller: %d latencies, want one per volume (%d)", r.cfg.Controller, len(latencies), r.cfg.Volumes)
			}
		}
		if r.peakRSS == 0 {
			t.Errorf("%s controller: no peak RSS measured", r.cfg.Controller)
		}
		// Attaching and detaching 50 volumes takes a controller more than the
		// clock tick of /proc's CPU times.
		if r.attachCPU <= 0 || r.churnCPU <= 0 {
			t.Errorf("%s controller: CPU time measured %s while attaching and %s during churn, want some", r.cfg.Controller, r.attachCPU, r.churnCPU)
		}
		checkTakeovers(t, r, killLeader, r.failovers)
		checkTakeovers(t, r, terminateLeader, r.handovers)
		for _, h := range r.handovers {
			if h.exited >= stopGracePeriod {
				t.Errorf("%s controller: the leader took %s to exit after SIGTERM, it was killed after %s", r.cfg.Controller, h.exited, stopGracePeriod)
			}
			// This controller releases its Lease on SIGTERM; upstream's is reported,
			// not checked (kube-controller-manager v1.37.1 exits at once unless the
			// alpha gate ControllerManagerReleaseLeaderElectionLockOnExit is on).
			if r.cfg.Controller == thisController && !h.released {
				t.Errorf("%s controller: the leader did not release the Lease on SIGTERM", r.cfg.Controller)
			}
			// Upstream's leader dies on SIGTERM before it can move anything: the new
			// leader makes every move. This controller's may make some before it
			// stops, even all.
			if _, ok := h.firstWriteAfter(); !ok && r.cfg.Controller == upstreamController {
				t.Errorf("%s controller: no VolumeAttachment or node status write by the new leader after the hand-over", r.cfg.Controller)
			}
		}
		if r.startupSynced <= 0 || r.startupSynced > r.startupToVA {
			t.Errorf("%s controller: start-up measured the informers synced after %s, the probe's VolumeAttachment after %s",
				r.cfg.Controller, r.startupSynced, r.startupToVA)
		}
		if r.startupToVA <= 0 || r.startupToStatus < r.startupToVA {
			t.Errorf("%s controller: start-up measured the probe's VolumeAttachment after %s and node status after %s",
				r.cfg.Controller, r.startupToVA, r.startupToStatus)
		}
		// Upstream's behaviour on restart is reported, not checked.
		if r.cfg.Controller == thisController && (r.startupVADeletes != 0 || r.startupOtherWrites != 0) {
			t.Errorf("%s controller: the restart deleted %d VolumeAttachments and wrote %d other nodes' status, want none",
				r.cfg.Controller, r.startupVADeletes, r.startupOtherWrites)
		}
		run := newRunResults(r)
		if len(run.Attach.PodToNodeStatusMs) != r.cfg.Volumes || !slices.IsSorted(run.Attach.PodToNodeStatusMs) {
			t.Errorf("%s controller: results hold %d pod → node status latencies, want %d, sorted",
				r.cfg.Controller, len(run.Attach.PodToNodeStatusMs), r.cfg.Volumes)
		}
	}
}

// checkTakeovers checks that a take-over phase made one take-over per run, each
// with every move timed, a new leader and, if the new leader wrote, its first write
// after the signal.
func checkTakeovers(t *testing.T, r *result, how leaderStop, takeovers []takeover) {
	t.Helper()
	if len(takeovers) != r.cfg.FailoverRuns || r.moves != r.cfg.Moves {
		t.Errorf("%s controller: %s measured %d take-overs of %d moves, want %d of %d",
			r.cfg.Controller, how.name, len(takeovers), r.moves, r.cfg.FailoverRuns, r.cfg.Moves)
	}
	for _, to := range takeovers {
		if len(to.moveTimes) != r.moves || to.allMoved <= 0 || to.newLeader <= 0 || to.exited < 0 {
			t.Errorf("%s controller: %s measured %d move times, all moved after %s, new leader after %s, leader exited after %s",
				r.cfg.Controller, how.name, len(to.moveTimes), to.allMoved, to.newLeader, to.exited)
		}
		if d, ok := to.firstWriteAfter(); ok && d <= 0 {
			t.Errorf("%s controller: %s measured the new leader's first write %s after the signal", r.cfg.Controller, how.name, d)
		}
	}
}

// TestResultsRoundTrip writes results.json and reads it back.
func TestResultsRoundTrip(t *testing.T) {
	want := &Results{
		Command: "go run ./test/bench",
		Lease:   LeaseTimings{DurationSeconds: 15, RenewDeadlineSeconds: 10, RetryPeriodSeconds: 2},
		Runs: []RunResults{{
			Controller: "this", Volumes: 2, Nodes: 10, QPS: 200, Burst: 300,
			Attach:            AttachResults{PodToNodeStatusMs: []float64{12.5, 40}, AttachEventShare: 1},
			Failover:          TakeoverResults{Moves: 1, Signal: "SIGKILL", MoveMs: []float64{16000}, Runs: []TakeoverRun{{NewLeaderSeconds: 15.5, MoveMs: []float64{16000}}}},
			Handover:          TakeoverResults{Moves: 1, Signal: "SIGTERM", FirstWriteSeconds: new(2.5), Runs: []TakeoverRun{{LeaseReleased: true, FirstWriteSeconds: new(2.5)}}},
			Requests:          map[string]map[string]int{"attach": {"create volumeattachments": 2}},
			RequestsPerVolume: map[string]float64{"attach": 1},
		}},
	}
	path := filepath.Join(t.TempDir(), resultsFile)
	if err := writeResults(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := readResults(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read back %+v, want %+v", got, want)
	}
}

// logWriter writes progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestNodesFor(t *testing.T) {
	for _, tc := range []struct {
		nodes, volumes, want int
	}{
		{nodes: 0, volumes: 50, want: 10},
		{nodes: 0, volumes: 1000, want: 100},
		{nodes: 0, volumes: 10000, want: 1000},
		{nodes: 50, volumes: 10000, want: 50},
	} {
		if got := (suite{Nodes: tc.nodes}).nodesFor(tc.volumes); got != tc.want {
			t.Errorf("-nodes=%d, %d volumes: %d nodes, want %d", tc.nodes, tc.volumes, got, tc.want)
		}
	}
}

func TestParseLease(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    leaseTimings
		wantErr bool
	}{
		{in: "15s/10s/2s", want: leaseTimings{Duration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}},
		{in: "3s/2s/500ms", want: leaseTimings{Duration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond}},
		{in: "15s/10s", wantErr: true},
		{in: "10s/10s/2s", wantErr: true},
		{in: "15s/2s/2s", wantErr: true},
		{in: "15s/10s/-1s", wantErr: true},
		{in: "15/10/2", wantErr: true},
	} {
		got, err := parseLease(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseLease(%q) = %v, %v; want %v, error %t", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestMedian(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{in: []float64{3}, want: 3},
		{in: []float64{15.2, 14.9, 17.1}, want: 15.2},
		{in: []float64{4, 1, 3, 2}, want: 2.5},
		{in: []float64{nan, 2, 9, nan, 4}, want: 4},
	} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
	for _, in := range [][]float64{nil, {nan, nan}} {
		if got := median(in); !math.IsNaN(got) {
			t.Errorf("median(%v) = %v, want NaN", in, got)
		}
	}
}

// TestFindFirstWrites takes the first attach or detach write of the controller's
// user received since the new leader's acquireTime, whatever the order of the log.
func TestFindFirstWrites(t *testing.T) {
	const user = "bench-attachdetach-controller"
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s float64) time.Time { return base.Add(time.Duration(s * float64(time.Second))) }
	events := []testenv.AuditEvent{
		{User: user, Verb: "update", Resource: "leases", Received: at(2.1)},
		{User: user, Verb: "delete", Resource: "volumeattachments", Received: at(4)},
		{User: user, Verb: "patch", Resource: "nodes", Subresource: "status", Received: at(1.5)}, // the old leader's
		{User: user, Verb: "create", Resource: "events", Received: at(2.2)},
		{User: user, Verb: "get", Resource: "volumeattachments", Received: at(2.3)},
		{User: user, Verb: "patch", Resource: "nodes", Received: at(2.4)},
		{User: "admin", Verb: "create", Resource: "volumeattachments", Received: at(2.5)},
		{User: user, Verb: "patch", Resource: "nodes", Subresource: "status", Received: at(3)},
	}
	takeovers := []takeover{
		{signalled: at(0), acquired: at(2)},
		{signalled: at(0), acquired: at(3.5)},
		{signalled: at(0), acquired: at(5)},
		{signalled: at(0)},
	}
	findFirstWrites(events, user, takeovers)
	for i, want := range []time.Duration{3 * time.Second, 4 * time.Second, 0, 0} {
		got, ok := takeovers[i].firstWriteAfter()
		if got != want || ok != (want != 0) {
			t.Errorf("take-over %d: first write after %s (%t), want %s", i, got, ok, want)
		}
	}
}

// TestTakeoverFigures gives a row per figure for one run; for three, a row per run
// of the per-run figures and a median of every figure, "–" where not measured.
func TestTakeoverFigures(t *testing.T) {
	ts := []takeover{
		{newLeader: 15 * time.Second, allMoved: 17 * time.Second, signalled: time.Unix(100, 0), firstWrite: time.Unix(116, 0)},
		{newLeader: 14 * time.Second, allMoved: 18 * time.Second},
		{newLeader: 16 * time.Second, allMoved: 16 * time.Second, signalled: time.Unix(100, 0), firstWrite: time.Unix(117, 0)},
	}
	r := &result{cfg: runConfig{Controller: thisController}, failovers: ts}
	list := []takeoverFigure{
		{"leader killed → other replica holds the Lease", true, newLeaderTime},
		{"leader killed → new leader's first VolumeAttachment or node status write", true, takeover.firstWriteAfter},
		{"other replica holds the Lease → every moved volume on its new node", false, leaseToAllMoved},
	}
	failovers := func(r *result) []takeover { return r.failovers }
	var got []string
	for _, f := range takeoverFigures("fail-over", 3, failovers, list) {
		got = append(got, f.name+" = "+cell(f, r))
	}
	want := []string{
		"fail-over: leader killed → other replica holds the Lease, run 1 (s) = 15.00",
		"fail-over: leader killed → other replica holds the Lease, run 2 (s) = 14.00",
		"fail-over: leader killed → other replica holds the Lease, run 3 (s) = 16.00",
		"fail-over: leader killed → other replica holds the Lease, median of 3 (s) = 15.00",
		"fail-over: leader killed → new leader's first VolumeAttachment or node status write, run 1 (s) = 16.00",
		"fail-over: leader killed → new leader's first VolumeAttachment or node status write, run 2 (s) = –",
		"fail-over: leader killed → new leader's first VolumeAttachment or node status write, run 3 (s) = 17.00",
		"fail-over: leader killed → new leader's first VolumeAttachment or node status write, median of 3 (s) = 16.50",
		"fail-over: other replica holds the Lease → every moved volume on its new node, median of 3 (s) = 2.00",
	}
	if !slices.Equal(got, want) {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	one := takeoverFigures("fail-over", 1, failovers, list[:1])
	r.failovers = ts[:1]
	if len(one) != 1 || one[0].name != "fail-over: leader killed → other replica holds the Lease (s)" || cell(one[0], r) != "15.00" {
		t.Errorf("one run: %d rows, first %q = %s", len(one), one[0].name, cell(one[0], r))
	}
}

func TestCopyToWritesExecutableCopies(t *testing.T) {
	src := t.TempDir()
	bins := executables{this: filepath.Join(src, "a"), upstream: filepath.Join(src, "b")}
	for path, content := range map[string]string{bins.this: "#!/bin/sh\necho this\n", bins.upstream: "#!/bin/sh\necho upstream\n"} {
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copies, err := bins.copyTo(filepath.Join(t.TempDir(), "bin"))
	if err != nil {
		t.Fatal(err)
	}
	for _, pair := range [][2]string{{bins.this, copies.this}, {bins.upstream, copies.upstream}} {
		want, _ := os.ReadFile(pair[0])
		got, err := os.ReadFile(pair[1])
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("copy %s of %s holds %q (%v), want %q", pair[1], pair[0], got, err, want)
		}
		if info, err := os.Stat(pair[1]); err != nil || info.Mode().Perm()&0o100 == 0 {
			t.Errorf("copy %s is not executable: %v", pair[1], err)
		}
	}
}
