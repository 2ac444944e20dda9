package main

import (
	"strings"
	"testing"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
)

// TestSmallRun runs the whole benchmark on a small workload so that the harness
// keeps working: 50 volumes on 10 nodes, a short idle period, one rate, both
// controllers, and draws its charts. Run with -v to see the table.
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
		PhaseTimeout:    time.Minute,
		AttacherWorkers: 16,
		KubeletWorkers:  8,
		Clients:         16,
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
	}
}

// logWriter writes progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
