package main

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
)

// TestSmallRun runs the whole benchmark on a small workload so that the harness
// keeps working: 50 volumes on 10 nodes, a short idle period, 10 pods moved with a
// 3 s lease, one rate, both controllers, and draws its charts. Run with -v to see
// the table.
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
		if r.moves != s.Moves || len(r.moveTimes) != s.Moves || r.allMoved <= 0 || r.newLeader <= 0 {
			t.Errorf("%s controller: fail-over measured %d moves (%d times), all moved after %s, new leader after %s; want %d moves",
				r.cfg.Controller, r.moves, len(r.moveTimes), r.allMoved, r.newLeader, s.Moves)
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

// TestResultsRoundTrip writes results.json and reads it back.
func TestResultsRoundTrip(t *testing.T) {
	want := &Results{
		Command: "go run ./test/bench",
		Lease:   LeaseTimings{DurationSeconds: 15, RenewDeadlineSeconds: 10, RetryPeriodSeconds: 2},
		Runs: []RunResults{{
			Controller: "this", Volumes: 2, Nodes: 10, QPS: 200, Burst: 300,
			Attach:            AttachResults{PodToNodeStatusMs: []float64{12.5, 40}, AttachEventShare: 1},
			Failover:          FailoverResults{Moves: 1, MoveMs: []float64{16000}},
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
