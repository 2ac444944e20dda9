package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"time"
)

// resultsFile is the name of the machine-readable results -out writes.
const resultsFile = "results.json"

// Results is what one invocation of the benchmark measured, in the form written to
// results.json by -out, for charts and later comparison. Times are in seconds where
// a field's name ends in Seconds and in milliseconds where it ends in Ms; latency
// lists are sorted ascending, one entry per volume, so that entry i of n is the
// (i+1)/n point of the cumulative distribution.
type Results struct {
	// Started is when the benchmark started; TookSeconds how long it ran.
	Started     time.Time `json:"started"`
	TookSeconds float64   `json:"tookSeconds"`
	// Command is the command line, Machine the cores, memory and CPU model.
	Command string `json:"command"`
	Machine string `json:"machine"`
	// ThisCommit is `git describe` of the controller's source; UpstreamVersion the
	// kube-controller-manager version.
	ThisCommit      string `json:"thisCommit"`
	UpstreamVersion string `json:"upstreamVersion"`
	// Lease is the leader election timing both controllers get in the fail-over
	// and hand-over phases.
	Lease LeaseTimings `json:"lease"`
	// ThisFlags are the extra flags this controller ran with (-this-flag).
	ThisFlags []string `json:"thisFlags,omitempty"`
	// Runs are the runs in the order they ran: for each size and rate, this
	// controller then upstream (as -controllers orders them).
	Runs []RunResults `json:"runs"`
}

// LeaseTimings are the leader election flags of both controllers in the fail-over
// and hand-over phases.
type LeaseTimings struct {
	DurationSeconds      float64 `json:"durationSeconds"`
	RenewDeadlineSeconds float64 `json:"renewDeadlineSeconds"`
	RetryPeriodSeconds   float64 `json:"retryPeriodSeconds"`
}

// RunResults is one controller on one workload at one client rate limit.
type RunResults struct {
	// Controller is "this" or "upstream".
	Controller string  `json:"controller"`
	Volumes    int     `json:"volumes"`
	Nodes      int     `json:"nodes"`
	QPS        float64 `json:"qps"`
	Burst      int     `json:"burst"`

	Attach   AttachResults   `json:"attach"`
	Steady   SteadyResults   `json:"steady"`
	Failover TakeoverResults `json:"failover"`
	Handover TakeoverResults `json:"handover"`
	Startup  StartupResults  `json:"startup"`
	Churn    ChurnResults    `json:"churn"`

	// Requests are the controller's API requests in each phase ("attach", "idle",
	// "failover", "handover", "startup", "churn"), by "verb resource[/subresource]" (e.g.
	// "patch nodes/status").
	Requests map[string]map[string]int `json:"requests"`
	// RequestsPerVolume is each phase's request total divided by Volumes, and under
	// "attach+idle+churn" the sum of those three.
	RequestsPerVolume map[string]float64 `json:"requestsPerVolume"`
}

// AttachResults is the attach phase: every pod created at once, from the first pod
// creation until every volume is in its node's status.volumesAttached.
type AttachResults struct {
	AllVolumeAttachmentsSeconds float64 `json:"allVolumeAttachmentsSeconds"`
	AllInNodeStatusSeconds      float64 `json:"allInNodeStatusSeconds"`
	// RequestFloorSeconds is (VolumeAttachment creates + node status writes −
	// burst)/QPS; IdealFloorSeconds the same with one node status write per node.
	RequestFloorSeconds float64 `json:"requestFloorSeconds"`
	IdealFloorSeconds   float64 `json:"idealFloorSeconds"`
	// Per-volume latencies, sorted ascending: pod first seen → volume first seen in
	// node status (the CDF chart's data), pod → VolumeAttachment first seen, and
	// status.attached first seen → volume in node status.
	PodToNodeStatusMs       []float64 `json:"podToNodeStatusMs"`
	PodToVolumeAttachmentMs []float64 `json:"podToVolumeAttachmentMs"`
	AttachedToNodeStatusMs  []float64 `json:"attachedToNodeStatusMs"`
	VolumeAttachmentCreates int       `json:"volumeAttachmentCreates"`
	NodeStatusWrites        int       `json:"nodeStatusWrites"`
	PodsWithAttachEvent     int       `json:"podsWithAttachEvent"`
	AttachEventShare        float64   `json:"attachEventShare"`
	// CPUSeconds is the controller's user+system CPU time over the phase, its
	// event drain included.
	CPUSeconds float64 `json:"cpuSeconds"`
}

// SteadyResults is the idle period with every volume attached.
type SteadyResults struct {
	IdleSeconds float64 `json:"idleSeconds"`
	// CPUSeconds is the controller's user+system CPU time over the idle period.
	CPUSeconds float64 `json:"cpuSeconds"`
	// PeakRSSBytes is VmHWM at the end of the idle period: the peak of the run so
	// far, attach burst included.
	PeakRSSBytes int64 `json:"peakRSSBytes"`
	Requests     int   `json:"requests"`
}

// TakeoverResults is a take-over phase, the fail-over or the hand-over: two
// leader-elected replicas, every volume attached, pods moved to other nodes at the
// moment the leader is stopped with Signal, one take-over per entry of Runs
// (-failover-runs). The times outside Runs are the medians of those in Runs, but
// MoveMs, which pools every run's.
type TakeoverResults struct {
	// Moves is the number of pods each take-over moved (deleted, and a pod with the
	// same claim created on the next node).
	Moves int `json:"moves"`
	// Signal is "SIGKILL" in the fail-over phase, "SIGTERM" in the hand-over.
	Signal            string   `json:"signal"`
	NewLeaderSeconds  float64  `json:"newLeaderSeconds"`
	FirstWriteSeconds *float64 `json:"firstWriteSeconds,omitempty"`
	AllMovedSeconds   float64  `json:"allMovedSeconds"`
	// MoveMs is each move's time from the signal to done, sorted ascending.
	MoveMs []float64     `json:"moveMs"`
	Runs   []TakeoverRun `json:"runs"`
}

// TakeoverRun is one take-over. Times run from the signal to the leader.
type TakeoverRun struct {
	// ExitSeconds is the signal → the leader's process exited.
	ExitSeconds float64 `json:"exitSeconds"`
	// LeaseReleased tells whether the leader released the Lease (emptied its
	// holder) before the other replica took it.
	LeaseReleased bool `json:"leaseReleased"`
	// NewLeaderSeconds is the signal → the Lease seen held by the other replica.
	NewLeaderSeconds float64 `json:"newLeaderSeconds"`
	// FirstWriteSeconds is the signal → the new leader's first VolumeAttachment
	// create or delete or node status write received by the API server: the first
	// such request of the controller's user received at or after the
	// spec.acquireTime the new leader wrote in the Lease. Absent if it made none
	// (the old leader did every move before it stopped).
	FirstWriteSeconds *float64 `json:"firstWriteSeconds,omitempty"`
	// AllMovedSeconds is the signal → every moved volume's old VolumeAttachment
	// gone, absent from its old node's status and in its new node's
	// status.volumesAttached.
	AllMovedSeconds float64 `json:"allMovedSeconds"`
	// MoveMs is each move's time from the signal to done, sorted ascending.
	MoveMs []float64 `json:"moveMs"`
}

// StartupResults is a restart of the controller (not leader-elected) with every
// volume attached: the old process stopped with SIGTERM, a new one started and, at
// the same moment, one probe pod with a new volume created.
type StartupResults struct {
	// ToVolumeAttachmentSeconds is the new process's start → the probe's
	// VolumeAttachment first seen: the controller's first decision.
	ToVolumeAttachmentSeconds float64 `json:"toVolumeAttachmentSeconds"`
	// ToNodeStatusSeconds is the new process's start → the probe volume first seen
	// in node status.
	ToNodeStatusSeconds float64 `json:"toNodeStatusSeconds"`
	// InformersSyncedSeconds is the new process's start → its informers synced, as
	// its log says: upstream's "Caches are synced", this controller's start of the
	// rebuild, after its start-up check.
	InformersSyncedSeconds float64 `json:"informersSyncedSeconds"`
	// VolumeAttachmentDeletes and OtherNodeStatusWrites count, from the new
	// process's start (the old one has exited) to a settling period after the
	// probe reached node status, the VolumeAttachments deleted and the status
	// writes to nodes other than the probe's: both are 0 when the restart detached
	// and re-wrote nothing. The old process's requests between its SIGTERM and its
	// exit are not the restart's and are left out.
	VolumeAttachmentDeletes int `json:"volumeAttachmentDeletes"`
	OtherNodeStatusWrites   int `json:"otherNodeStatusWrites"`
}

// ChurnResults is every pod deleted at once, from the first deletion.
type ChurnResults struct {
	AllVolumeAttachmentsGoneSeconds float64 `json:"allVolumeAttachmentsGoneSeconds"`
	AllNodeStatusesEmptySeconds     float64 `json:"allNodeStatusesEmptySeconds"`
	// CPUSeconds is the controller's user+system CPU time over the phase.
	CPUSeconds float64 `json:"cpuSeconds"`
}

// readResults reads a results.json.
func readResults(path string) (*Results, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading results: %w", err)
	}
	var r Results
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("parsing results %s: %w", path, err)
	}
	return &r, nil
}

// writeResults writes r as indented JSON to path.
func writeResults(path string, r *Results) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding results: %w", err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	return nil
}

// newRunResults converts what one run measured.
func newRunResults(r *result) RunResults {
	requests := map[string]map[string]int{}
	perVolume := map[string]float64{}
	for p := range numPhases {
		byRequest := map[string]int{}
		for k, n := range byKind(r.requests[p]) {
			byRequest[k.String()] += n
		}
		requests[p.String()] = byRequest
		perVolume[p.String()] = r.requestsPerVolume(p)
	}
	perVolume["attach+idle+churn"] = r.requestsPerVolume(breakdownPhases...)
	vaCreates := countWhere(r.requests[attachPhase], "create", "volumeattachments")
	return RunResults{
		Controller: string(r.cfg.Controller),
		Volumes:    r.cfg.Volumes,
		Nodes:      r.cfg.Nodes,
		QPS:        r.cfg.Rate.QPS,
		Burst:      r.cfg.Rate.Burst,
		Attach: AttachResults{
			AllVolumeAttachmentsSeconds: r.allVAs.Seconds(),
			AllInNodeStatusSeconds:      r.allInStatus.Seconds(),
			RequestFloorSeconds:         r.requestFloor().Seconds(),
			IdealFloorSeconds:           r.idealFloor().Seconds(),
			PodToNodeStatusMs:           millis(r.podToStatus),
			PodToVolumeAttachmentMs:     millis(r.podToVA),
			AttachedToNodeStatusMs:      millis(r.attachedToStatus),
			VolumeAttachmentCreates:     vaCreates,
			NodeStatusWrites:            r.attachWrites() - vaCreates,
			PodsWithAttachEvent:         r.podsWithEvent,
			AttachEventShare:            r.attachEventShare(),
			CPUSeconds:                  r.attachCPU.Seconds(),
		},
		Steady: SteadyResults{
			IdleSeconds:  r.cfg.Idle.Seconds(),
			CPUSeconds:   r.idleCPU.Seconds(),
			PeakRSSBytes: r.peakRSS,
			Requests:     r.requests[idlePhase].Total(),
		},
		Failover: newTakeoverResults(r.moves, killLeader, r.failovers),
		Handover: newTakeoverResults(r.moves, terminateLeader, r.handovers),
		Startup: StartupResults{
			ToVolumeAttachmentSeconds: r.startupToVA.Seconds(),
			ToNodeStatusSeconds:       r.startupToStatus.Seconds(),
			InformersSyncedSeconds:    r.startupSynced.Seconds(),
			VolumeAttachmentDeletes:   r.startupVADeletes,
			OtherNodeStatusWrites:     r.startupOtherWrites,
		},
		Churn: ChurnResults{
			AllVolumeAttachmentsGoneSeconds: r.allVAsGone.Seconds(),
			AllNodeStatusesEmptySeconds:     r.allNodesEmpty.Seconds(),
			CPUSeconds:                      r.churnCPU.Seconds(),
		},
		Requests:          requests,
		RequestsPerVolume: perVolume,
	}
}

// newTakeoverResults converts the take-overs of one phase.
func newTakeoverResults(moves int, how leaderStop, takeovers []takeover) TakeoverResults {
	out := TakeoverResults{
		Moves:             moves,
		Signal:            how.signal,
		NewLeaderSeconds:  newLeaderTime.median(takeovers),
		FirstWriteSeconds: optional(takeover.firstWriteAfter, takeovers),
		AllMovedSeconds:   allMovedTime.median(takeovers),
	}
	var all []time.Duration
	for _, t := range takeovers {
		out.Runs = append(out.Runs, TakeoverRun{
			ExitSeconds:       t.exited.Seconds(),
			LeaseReleased:     t.released,
			NewLeaderSeconds:  t.newLeader.Seconds(),
			FirstWriteSeconds: optional(takeover.firstWriteAfter, []takeover{t}),
			AllMovedSeconds:   t.allMoved.Seconds(),
			MoveMs:            millis(t.moveTimes),
		})
		all = append(all, t.moveTimes...)
	}
	slices.Sort(all)
	out.MoveMs = millis(all)
	return out
}

// optional is a time's median over the take-overs in seconds, nil if none
// measured it.
func optional(f takeoverTime, takeovers []takeover) *float64 {
	v := f.median(takeovers)
	if math.IsNaN(v) {
		return nil
	}
	return &v
}

// millis converts durations to milliseconds.
func millis(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = ms(d)
	}
	return out
}
