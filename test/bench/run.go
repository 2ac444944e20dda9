package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/attachdetach-controller/attachdetach-controller/internal/proc"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/attachments"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/controller"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/leasewatch"
)

const (
	namespace = "bench"
	driver    = "bench.csi.example.com"
	// probe is the volume attached and detached once before measuring, and again by
	// the leader before the fail-over, to know the controller is up and working.
	probe = "probe"
	// startupProbe is the volume whose pod is created as the restarted controller
	// starts.
	startupProbe = "probe-startup"
	// movedSuffix, and the number of the take-over, end the name of a pod that
	// replaces a moved pod.
	movedSuffix = "-moved"
	// startupTimeout bounds the controller's start, up to the probe being detached.
	startupTimeout = 5 * time.Minute
	// logTimeout is how long a line may take to reach a controller's log.
	logTimeout = 10 * time.Second
	// stopGracePeriod is how long a controller gets to stop after SIGTERM.
	stopGracePeriod = 10 * time.Second
	pollInterval    = 10 * time.Millisecond
	// attachedReason is the reason of the event both controllers put on a pod once
	// its volume is attached.
	attachedReason = "SuccessfulAttachVolume"
	// eventsQuiet ends the wait for attach events when some never come.
	eventsQuiet = 5 * time.Second
	// startupSettle is how long the start-up phase goes on after the probe reached
	// node status, so that a late rewrite or detach is counted in it.
	startupSettle = 2 * time.Second
	// progressInterval is how often long bulk operations report progress.
	progressInterval = 5 * time.Second
)

// standbyLines are what a replica logs, in any order, once it stands by for the
// Lease: for upstream, client-go's elector as it starts trying to take it; for
// this controller, its watch of the Lease, under which the elector starts only
// once the Lease is free, and its informers synced, which is when its /readyz
// turns OK and a rolling update would stop the leader.
var standbyLines = map[controllerKind][]string{
	thisController:     {leasewatch.WatchingLine, controller.PreparedLine},
	upstreamController: {"Attempting to acquire leader lease"},
}

// runConfig is one controller on one workload at one rate limit.
type runConfig struct {
	Controller  controllerKind
	Executables executables
	Rate        rate
	Volumes     int
	Nodes       int
	// Idle is how long every volume stays attached with nothing happening.
	Idle time.Duration
	// Moves is how many pods each take-over of the fail-over and hand-over phases
	// moves to another node.
	Moves int
	// FailoverRuns is how many take-overs the fail-over and hand-over phases make
	// each.
	FailoverRuns int
	// Lease is the leader election timing of the fail-over and hand-over phases.
	Lease leaseTimings
	// PhaseTimeout bounds the attach and churn phases each, and each take-over's
	// moves.
	PhaseTimeout time.Duration
	// AttacherWorkers and KubeletWorkers size the simulators; Clients is how many
	// requests the load generator has in flight.
	AttacherWorkers, KubeletWorkers, Clients int
	// ThisFlags are extra flags for this controller's processes.
	ThisFlags []string
	// Objects says whether nodes, pods, claims and PersistentVolumes carry what
	// they carry in a real cluster (see objects.go).
	Objects objects
	// Profile, if not zero, is the length of the CPU profile of this controller
	// taken from the start of the attach phase; its heap is profiled after the idle
	// period (see profile.go).
	Profile time.Duration
	// Dir holds the controller's kubeconfig and logs.
	Dir string
	// Progress receives a line per step.
	Progress io.Writer
}

// phase is a measured part of a run. The attach phase's requests include the
// SuccessfulAttachVolume events written after the last volume reached node status:
// the idle phase starts once they are in.
type phase int

const (
	attachPhase phase = iota
	idlePhase
	failoverPhase
	handoverPhase
	startupPhase
	churnPhase
	numPhases
)

func (p phase) String() string {
	return [...]string{"attach", "idle", "failover", "handover", "startup", "churn"}[p]
}

// window is when a phase ran, from included to to excluded.
type window struct{ from, to time.Time }

func (w window) contains(t time.Time) bool { return !t.Before(w.from) && t.Before(w.to) }

// result is what one run measured.
type result struct {
	cfg runConfig
	// Attach: from the first pod creation to the last VolumeAttachment first seen
	// and to the last volume first seen in node status; per-volume latencies, sorted;
	// the pods that got a SuccessfulAttachVolume event.
	allVAs, allInStatus                    time.Duration
	podToVA, attachedToStatus, podToStatus []time.Duration
	podsWithEvent                          int
	// attachCPU and churnCPU are the controller's CPU time over the attach and
	// churn phases: per operation, a figure that holds across machines.
	attachCPU, churnCPU time.Duration
	// Steady: CPU used during the idle period and peak RSS at its end.
	idleCPU time.Duration
	peakRSS int64
	// Fail-over and hand-over: the pods each take-over moved, and the take-overs
	// with the leader stopped by SIGKILL and by SIGTERM.
	moves                int
	failovers, handovers []takeover
	// Start-up: from the new process's start to the probe's VolumeAttachment and to
	// its volume in node status; VolumeAttachments deleted and other nodes' status
	// writes from SIGTERM to the end of the phase.
	startupToVA, startupToStatus time.Duration
	// startupSynced is from the new process's start to its informers synced, as
	// its log tells (informersSynced).
	startupSynced                        time.Duration
	startupVADeletes, startupOtherWrites int
	// Churn: from the first pod deletion to the last VolumeAttachment gone and to
	// the last node status emptied.
	allVAsGone, allNodesEmpty time.Duration
	// requests are the controller user's requests in each phase.
	requests [numPhases]testenv.RequestCounts
}

// placement is where a volume's pod is now.
type placement struct{ pod, node string }

// world is a fresh control plane with the simulators, the observer and the
// benchmark's volumes, around the controller processes.
type world struct {
	cfg        runConfig
	env        *testenv.Env
	client     kubernetes.Interface
	workload   *workload.Workload
	kubeconfig string
	nodes      []string
	volumes    []string
	podsMu     sync.Mutex
	pods       map[string]placement // volume -> its pod
	observer   *observer
	began      time.Time
	// startupNode is the node of the start-up probe's pod; restarted is when the
	// start-up phase's new process was started, after the old one had exited.
	startupNode string
	restarted   time.Time
	// replicas counts the leader-elected replicas started, takeovers the take-overs
	// made, to name them and the moved pods.
	replicas, takeovers int
	// ctrl is the controller process the phases measure; live holds the processes
	// that must keep running, all every process started.
	ctrl *proc.Process
	live []*proc.Process
	all  []*proc.Process
	// profiler reaches ctrl's profiles with -profile, else nil.
	profiler *profiler
}

// run measures one controller on a control plane of its own.
func run(ctx context.Context, cfg runConfig) (res *result, err error) {
	user := cfg.Controller.userName()
	token, err := testenv.NewToken()
	if err != nil {
		return nil, err
	}
	env, err := testenv.Start(ctx, testenv.Options{
		Users:      []testenv.User{{Name: user, Token: token, Groups: []string{"system:masters"}}},
		AuditUsers: []string{user},
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			env.KeepLogs()
		}
		env.Stop()
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	w := &world{
		cfg:        cfg,
		env:        env,
		client:     env.Client,
		workload:   &workload.Workload{Client: env.Client, Namespace: namespace, Driver: driver},
		kubeconfig: filepath.Join(cfg.Dir, "kubeconfig"),
		pods:       map[string]placement{},
		began:      time.Now(),
	}
	if err := env.WriteKubeconfig(w.kubeconfig, token); err != nil {
		return nil, err
	}
	if err := w.setUp(ctx); err != nil {
		return nil, err
	}
	defer func() {
		if stopErr := w.stopAll(); err == nil {
			err = stopErr
		}
		if err != nil {
			err = fmt.Errorf("%w\ncontroller logs: %s", err, w.logPaths())
		}
	}()
	var extra []string
	if cfg.Profile > 0 && cfg.Controller == thisController {
		addr, err := freeAddress()
		if err != nil {
			return nil, err
		}
		w.profiler = &profiler{addr: addr, dir: cfg.Dir}
		// The profiler fetches without a token.
		extra = []string{"--http-endpoint=" + addr, "--http-endpoint-insecure", "--enable-pprof"}
	}
	if w.ctrl, err = w.startController("controller", nil, extra...); err != nil {
		return nil, err
	}
	if err := w.warmUp(ctx); err != nil {
		return nil, err
	}
	res = &result{cfg: cfg}
	var windows [numPhases]window
	for _, step := range []func(context.Context, *result, *[numPhases]window) error{
		w.measureAttach, w.measureSteady, w.measureFailover, w.measureHandover, w.measureStartup, w.measureChurn,
	} {
		if err := step(ctx, res, &windows); err != nil {
			return nil, err
		}
	}
	if err := w.stopAll(); err != nil {
		return nil, err
	}
	events, err := env.AuditEvents()
	if err != nil {
		return nil, err
	}
	res.requests = countByPhase(events, user, windows)
	for _, ts := range [][]takeover{res.failovers, res.handovers} {
		findFirstWrites(events, user, ts)
	}
	res.startupVADeletes, res.startupOtherWrites = countRestartWrites(events, user, window{from: w.restarted, to: windows[startupPhase].to}, w.startupNode)
	return res, nil
}

// progressf writes a progress line, indented under the run's line, with the time
// since the run began.
func (w *world) progressf(format string, args ...any) {
	fmt.Fprintf(w.cfg.Progress, "  [%5.0fs] %s\n", time.Since(w.began).Seconds(), fmt.Sprintf(format, args...))
}

// setUp creates the namespace, the CSIDriver, the nodes with their kubelet
// simulator, the attacher simulator, the observer, and the bound claims and PVs.
func (w *world) setUp(ctx context.Context) error {
	if err := w.workload.CreateNamespace(ctx); err != nil {
		return err
	}
	csiDriver := &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: driver},
		Spec:       storagev1.CSIDriverSpec{AttachRequired: new(true)},
	}
	if _, err := w.client.StorageV1().CSIDrivers().Create(ctx, csiDriver, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating CSIDriver: %w", err)
	}
	for i := range w.cfg.Nodes {
		w.nodes = append(w.nodes, fmt.Sprintf("node-%04d", i))
	}
	for i := range w.cfg.Volumes {
		w.volumes = append(w.volumes, fmt.Sprintf("vol-%05d", i))
	}
	started := time.Now()
	if err := w.bulk(ctx, "set-up: nodes created", len(w.nodes), func(i int) error {
		if _, err := w.client.CoreV1().Nodes().Create(ctx, w.newNode(w.nodes[i]), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating node %s: %w", w.nodes[i], err)
		}
		return nil
	}); err != nil {
		return err
	}
	var err error
	if _, err = sim.StartKubelet(ctx, w.env.AdminConfig(), sim.KubeletOptions{
		Nodes: w.nodes, CreateNodes: true, Workers: w.cfg.KubeletWorkers,
	}); err != nil {
		return err
	}
	if _, err = sim.StartAttacher(ctx, w.env.AdminConfig(), sim.AttacherOptions{
		Drivers: []string{driver}, Workers: w.cfg.AttacherWorkers,
	}); err != nil {
		return err
	}
	if w.observer, err = startObserver(ctx, w.workload); err != nil {
		return err
	}
	w.progressf("set-up: nodes, simulated kubelet and attacher, observer ready after %s", time.Since(started).Round(time.Millisecond))
	all := append([]string{probe, startupProbe}, w.volumes...)
	return w.bulk(ctx, "set-up: claims and PersistentVolumes created", len(all), func(i int) error {
		_, err := w.workload.CreateVolume(ctx, all[i], w.volumeOptions())
		return err
	})
}

// newNode is a node of the simulated kubelet, dressed as Objects says.
func (w *world) newNode(name string) *corev1.Node {
	node := sim.NewNode(name)
	if w.cfg.Objects == realisticObjects {
		dressNode(node)
	}
	return node
}

// volumeOptions dress claims and PersistentVolumes as Objects says.
func (w *world) volumeOptions() workload.VolumeOptions {
	if w.cfg.Objects != realisticObjects {
		return workload.VolumeOptions{}
	}
	return workload.VolumeOptions{Claim: dressClaim, PV: dressPV}
}

// bulk calls f(0..n-1) from the load generator's clients, reporting progress while
// it runs for more than progressInterval and once it is done.
func (w *world) bulk(ctx context.Context, what string, n int, f func(i int) error) error {
	var done atomic.Int64
	started := time.Now()
	tick := time.NewTicker(progressInterval)
	defer tick.Stop()
	finished := make(chan error, 1)
	go func() {
		finished <- parallel(ctx, n, w.cfg.Clients, func(i int) error {
			defer done.Add(1)
			return f(i)
		})
	}()
	for {
		select {
		case err := <-finished:
			if err == nil {
				w.progressf("%s: %d in %s", what, n, time.Since(started).Round(time.Millisecond))
			}
			return err
		case <-tick.C:
			w.progressf("%s: %d/%d", what, done.Load(), n)
		}
	}
}

// startController starts a controller process, logging to name.log, with leader
// election when lease is not nil and the extra arguments.
func (w *world) startController(name string, lease *leaseTimings, extra ...string) (*proc.Process, error) {
	binary := w.cfg.Executables.this
	if w.cfg.Controller == upstreamController {
		binary = w.cfg.Executables.upstream
	} else {
		extra = append(slices.Clone(w.cfg.ThisFlags), extra...)
	}
	p, err := proc.Start(fmt.Sprintf("%s controller (%s)", w.cfg.Controller, name), filepath.Join(w.cfg.Dir, name+".log"), binary,
		append(controllerArgs(w.cfg.Controller, w.kubeconfig, w.cfg.Rate, lease), extra...)...)
	if err != nil {
		return nil, err
	}
	w.live = append(w.live, p)
	w.all = append(w.all, p)
	return p, nil
}

// stop stops a controller process with SIGTERM, or SIGKILL after stopGracePeriod.
func (w *world) stop(p *proc.Process) error {
	w.forget(p)
	return p.Stop(stopGracePeriod)
}

// forget takes a process off the list of those that must keep running.
func (w *world) forget(p *proc.Process) {
	w.live = slices.DeleteFunc(w.live, func(q *proc.Process) bool { return q == p })
}

// stopAll stops every controller process still running.
func (w *world) stopAll() error {
	var errs []error
	for _, p := range w.all {
		w.forget(p)
		if p.Running() {
			errs = append(errs, p.Stop(stopGracePeriod))
		}
	}
	return errors.Join(errs...)
}

func (w *world) logPaths() string {
	paths := make([]string, len(w.all))
	for i, p := range w.all {
		paths[i] = p.LogPath()
	}
	return strings.Join(paths, " ")
}

// warmUp attaches and detaches the probe volume: the controller is then up, synced
// and working.
func (w *world) warmUp(ctx context.Context) error {
	node := w.nodes[0]
	if err := w.createPod(ctx, probe, probe, node); err != nil {
		return err
	}
	if err := w.waitFor(ctx, startupTimeout, "the probe volume to be attached", func() bool {
		return w.observer.listed(node, probe)
	}); err != nil {
		return err
	}
	if err := w.deletePod(ctx, probe); err != nil {
		return err
	}
	va := w.workload.NewVolume(probe, workload.VolumeOptions{}).AttachmentName(node)
	return w.waitFor(ctx, startupTimeout, "the probe volume to be detached", func() bool {
		return w.observer.detached(probe, node, va)
	})
}

// measureAttach creates every pod at once and waits for every volume in node status
// and for the SuccessfulAttachVolume events.
func (w *world) measureAttach(ctx context.Context, res *result, windows *[numPhases]window) error {
	cpu, err := w.startCPU()
	if err != nil {
		return err
	}
	windows[attachPhase].from = time.Now()
	waitProfile := func() error { return nil }
	if w.profiler != nil {
		waitProfile = w.profiler.startCPU(ctx, cpuProfileFile, w.cfg.Profile)
	}
	if err := w.bulk(ctx, "attach: pods created", len(w.volumes), func(i int) error {
		return w.createPod(ctx, w.volumes[i], w.volumes[i], w.nodes[i%len(w.nodes)])
	}); err != nil {
		return err
	}
	if err := w.waitFor(ctx, w.cfg.PhaseTimeout, "every volume in node status", func() bool {
		return w.observer.allInStatus(w.volumes)
	}); err != nil {
		return err
	}
	attached := time.Now()
	w.attachFigures(res, windows[attachPhase].from)
	w.progressf("attach: every volume in node status after %s", seconds(res.allInStatus))
	if err := w.waitFor(ctx, w.cfg.PhaseTimeout, "the SuccessfulAttachVolume events", func() bool {
		return w.observer.eventsSettled(w.volumes, attached, eventsQuiet)
	}); err != nil {
		return err
	}
	res.podsWithEvent = w.observer.withAttachEvent(w.volumes)
	windows[attachPhase].to = time.Now()
	if res.attachCPU, err = cpu(); err != nil {
		return err
	}
	return waitProfile()
}

// measureSteady idles with every volume attached, measuring the controller's CPU
// time and peak RSS.
func (w *world) measureSteady(ctx context.Context, res *result, windows *[numPhases]window) error {
	cpu, err := w.startCPU()
	if err != nil {
		return err
	}
	windows[idlePhase].from = time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(w.cfg.Idle):
	}
	if res.idleCPU, err = cpu(); err != nil {
		return err
	}
	if res.peakRSS, err = peakRSS(w.ctrl.Pid()); err != nil {
		return err
	}
	windows[idlePhase].to = time.Now()
	w.progressf("steady: %s of CPU in %s, peak RSS %d MiB", res.idleCPU, w.cfg.Idle, res.peakRSS>>20)
	if w.profiler != nil {
		return w.profiler.heap(ctx, heapProfileFile)
	}
	return nil
}

// move is one pod moved to another node in a take-over.
type move struct {
	volume   string
	from, to placement
	fromVA   string
}

// takeover is one change of leader: the leader stopped, by SIGKILL or SIGTERM, at
// the moment Moves pods move to another node. Times run from the signal.
type takeover struct {
	signalled time.Time
	// exited: the old leader's process has exited; newLeader: the other replica
	// seen holding the Lease; allMoved: every move done, moveTimes each (sorted).
	exited, newLeader, allMoved time.Duration
	moveTimes                   []time.Duration
	// released tells whether the old leader released the Lease (emptied its
	// holder) before the other replica took it.
	released bool
	// acquired is the spec.acquireTime the new leader wrote as it took the Lease:
	// every write of the controller's user received since is the new leader's (the
	// old one has stopped writing before it releases the Lease, or was killed).
	acquired time.Time
	// firstWrite is when the API server received the new leader's first
	// VolumeAttachment create or delete or node status write; zero if it made none
	// (the old leader may have done every move before it stopped).
	firstWrite time.Time
}

// firstWriteAfter is the signal → the new leader's first VolumeAttachment or node
// status write, false if it made none.
func (t takeover) firstWriteAfter() (time.Duration, bool) {
	if t.firstWrite.IsZero() {
		return 0, false
	}
	return t.firstWrite.Sub(t.signalled), true
}

// leaderStop is how a take-over phase stops the leader.
type leaderStop struct {
	phase phase
	// name is the phase's name in progress lines and errors, signal the signal's.
	name, signal string
	stop         func(*proc.Process) error
}

var (
	// killLeader is the fail-over: a crash or a lost node.
	killLeader = leaderStop{phase: failoverPhase, name: "fail-over", signal: "SIGKILL", stop: (*proc.Process).Kill}
	// terminateLeader is the hand-over: a rolling update, the process given
	// stopGracePeriod to stop as it chooses.
	terminateLeader = leaderStop{phase: handoverPhase, name: "hand-over", signal: "SIGTERM", stop: func(p *proc.Process) error {
		return p.Stop(stopGracePeriod)
	}}
)

// measureFailover replaces the controller by a leader-elected replica, then makes
// FailoverRuns take-overs with SIGKILL. The last new leader stays as the
// controller.
func (w *world) measureFailover(ctx context.Context, res *result, windows *[numPhases]window) error {
	if err := w.stop(w.ctrl); err != nil {
		return err
	}
	key := w.cfg.Controller.leaseKey()
	first, err := w.startReplica()
	if err != nil {
		return err
	}
	if err := w.waitFor(ctx, startupTimeout, "replica 1 to take the Lease "+key, func() bool {
		return w.observer.leaseHolder(key).identity != ""
	}); err != nil {
		return err
	}
	w.ctrl = first
	res.moves = min(w.cfg.Moves, len(w.volumes))
	res.failovers, err = w.takeOvers(ctx, killLeader, windows)
	return err
}

// measureHandover makes FailoverRuns take-overs with SIGTERM, from the leader the
// fail-over phase left. The last new leader stays as the controller.
func (w *world) measureHandover(ctx context.Context, res *result, windows *[numPhases]window) error {
	var err error
	res.handovers, err = w.takeOvers(ctx, terminateLeader, windows)
	return err
}

// takeOvers makes FailoverRuns take-overs from the leader w.ctrl: each starts a
// standby replica, checks the leader works, and stops the leader as how says at
// the moment Moves pods move. The new leader becomes w.ctrl. The phase's window
// runs from the first signal to the end of the last take-over.
func (w *world) takeOvers(ctx context.Context, how leaderStop, windows *[numPhases]window) ([]takeover, error) {
	key := w.cfg.Controller.leaseKey()
	leaderID := w.observer.leaseHolder(key).identity
	var out []takeover
	for i := range w.cfg.FailoverRuns {
		standby, err := w.startStandby(ctx)
		if err != nil {
			return nil, err
		}
		if err := w.warmUp(ctx); err != nil {
			return nil, fmt.Errorf("before %s %d: %w", how.name, i+1, err)
		}
		leader := w.ctrl
		if h := w.observer.leaseHolder(key).identity; h != leaderID {
			// The standby took the Lease while starting: it leads now.
			leader, standby, leaderID = standby, leader, h
		}
		w.progressf("%s %d/%d: %s to leader %s as pods move", how.name, i+1, w.cfg.FailoverRuns, how.signal, leaderID)
		t, err := w.takeOver(ctx, how, leader, leaderID)
		if err != nil {
			return nil, fmt.Errorf("%s %d: %w", how.name, i+1, err)
		}
		if i == 0 {
			windows[how.phase].from = t.signalled
		}
		out = append(out, t)
		w.ctrl, leaderID = standby, w.observer.leaseHolder(key).identity
	}
	windows[how.phase].to = time.Now()
	return out, nil
}

// startReplica starts the next leader-elected replica.
func (w *world) startReplica() (*proc.Process, error) {
	w.replicas++
	return w.startController(fmt.Sprintf("replica-%d", w.replicas), &w.cfg.Lease)
}

// startStandby starts a leader-elected replica while another leads, and waits until
// it stands by (standbyLines).
func (w *world) startStandby(ctx context.Context) (*proc.Process, error) {
	p, err := w.startReplica()
	if err != nil {
		return nil, err
	}
	readyCtx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	for _, line := range standbyLines[w.cfg.Controller] {
		if err := p.WaitReady(readyCtx, line); err != nil {
			return nil, fmt.Errorf("replica %d: %w", w.replicas, err)
		}
	}
	return p, nil
}

// takeOver stops the leader, whose identity holds the Lease, as how says, at the
// moment Moves pods move to the next node, and waits until every move is done, the
// leader has exited and the other replica holds the Lease.
func (w *world) takeOver(ctx context.Context, how leaderStop, leader *proc.Process, leaderID string) (takeover, error) {
	key := w.cfg.Controller.leaseKey()
	moves := w.planMoves()
	w.forget(leader)
	t := takeover{signalled: time.Now()}
	var exitedAt time.Time
	stopped := make(chan error, 1)
	go func() {
		err := how.stop(leader)
		exitedAt = time.Now()
		stopped <- err
	}()
	if err := w.move(ctx, moves); err != nil {
		return t, err
	}
	done, err := w.waitMoved(ctx, moves, t.signalled)
	if err != nil {
		return t, err
	}
	if err := <-stopped; err != nil {
		return t, err
	}
	if err := w.waitFor(ctx, startupTimeout, "the other replica to hold the Lease", func() bool {
		h := w.observer.leaseHolder(key)
		return h.identity != "" && h.identity != leaderID
	}); err != nil {
		return t, err
	}
	h := w.observer.leaseHolder(key)
	t.exited = exitedAt.Sub(t.signalled)
	t.newLeader = h.since.Sub(t.signalled)
	t.acquired = h.acquired
	t.released = w.observer.releasedSince(key, t.signalled)
	t.moveTimes = done
	if len(done) > 0 {
		t.allMoved = done[len(done)-1]
	}
	w.progressf("%s: leader exited after %s (Lease released: %t), new leader after %s, all %d moves done after %s (lease %s)",
		how.name, seconds(t.exited), t.released, seconds(t.newLeader), len(moves), seconds(t.allMoved), w.cfg.Lease.Duration)
	return t, nil
}

// planMoves moves the pods of the first Moves volumes each to the node after its
// own, as pods named for this take-over.
func (w *world) planMoves() []move {
	w.takeovers++
	moves := make([]move, min(w.cfg.Moves, len(w.volumes)))
	for i := range moves {
		v := w.volumes[i]
		from := w.pods[v]
		moves[i] = move{
			volume: v,
			from:   from,
			to: placement{
				pod:  fmt.Sprintf("%s%s-%d", v, movedSuffix, w.takeovers),
				node: w.nodes[(slices.Index(w.nodes, from.node)+1)%len(w.nodes)],
			},
			fromVA: w.workload.NewVolume(v, workload.VolumeOptions{}).AttachmentName(from.node),
		}
	}
	return moves
}

// move deletes each moved pod and creates its replacement on its new node.
func (w *world) move(ctx context.Context, moves []move) error {
	return parallel(ctx, len(moves), w.cfg.Clients, func(i int) error {
		m := moves[i]
		if err := w.deletePod(ctx, m.volume); err != nil {
			return err
		}
		return w.createPod(ctx, m.to.pod, m.volume, m.to.node)
	})
}

// waitMoved waits until every move is done and returns the time from start to each
// move done, sorted.
func (w *world) waitMoved(ctx context.Context, moves []move, start time.Time) ([]time.Duration, error) {
	done := make([]time.Duration, len(moves))
	if err := w.waitFor(ctx, w.cfg.PhaseTimeout, "every moved volume on its new node", func() bool {
		all := true
		for i, m := range moves {
			if done[i] == 0 && w.observer.moved(m.volume, m.from.node, m.fromVA, m.to.node) {
				done[i] = time.Since(start)
			}
			all = all && done[i] != 0
		}
		return all
	}); err != nil {
		return nil, err
	}
	slices.Sort(done)
	return done, nil
}

// measureStartup restarts the controller without leader election: SIGTERM to the
// running one, then a new process and, at once, a pod for a new volume; it measures
// the new process's start to the probe's VolumeAttachment and to its volume in node
// status.
func (w *world) measureStartup(ctx context.Context, res *result, windows *[numPhases]window) error {
	windows[startupPhase].from = time.Now()
	if err := w.stop(w.ctrl); err != nil {
		return err
	}
	w.startupNode = w.nodes[len(w.nodes)/2]
	node := w.startupNode
	started := time.Now()
	w.restarted = started
	var err error
	if w.ctrl, err = w.startController("restarted", nil); err != nil {
		return err
	}
	if err := w.createPod(ctx, startupProbe, startupProbe, node); err != nil {
		return err
	}
	if err := w.waitFor(ctx, startupTimeout, "the start-up probe in node status", func() bool {
		return w.observer.allInStatus([]string{startupProbe})
	}); err != nil {
		return err
	}
	t := w.observer.times([]string{startupProbe})[0]
	res.startupToVA, res.startupToStatus = t.va.Sub(started), t.inStatus.Sub(started)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(startupSettle):
	}
	windows[startupPhase].to = time.Now()
	var synced time.Time
	var readErr error
	if err := w.waitFor(ctx, logTimeout, "the start-up's informer sync in the log", func() bool {
		var ok bool
		synced, ok, readErr = informersSynced(w.ctrl.LogPath(), w.cfg.Controller, started.Year())
		return ok || readErr != nil
	}); err != nil {
		return err
	}
	if readErr != nil {
		return readErr
	}
	res.startupSynced = synced.Sub(started)
	w.progressf("start-up: informers synced after %s, first VolumeAttachment after %s, in node status after %s",
		seconds(res.startupSynced), seconds(res.startupToVA), seconds(res.startupToStatus))
	return w.exited()
}

// measureChurn deletes every pod at once and waits until every VolumeAttachment is
// gone and every node status empty.
func (w *world) measureChurn(ctx context.Context, res *result, windows *[numPhases]window) error {
	volumes := slices.Collect(maps.Keys(w.pods))
	cpu, err := w.startCPU()
	if err != nil {
		return err
	}
	windows[churnPhase].from = time.Now()
	if err := w.bulk(ctx, "churn: pods deleted", len(volumes), func(i int) error {
		return w.deletePod(ctx, volumes[i])
	}); err != nil {
		return err
	}
	if err := w.waitFor(ctx, w.cfg.PhaseTimeout, "every VolumeAttachment gone and every node status empty", w.observer.allGone); err != nil {
		return err
	}
	windows[churnPhase].to = time.Now()
	vasGone, nodesEmpty := w.observer.goneTimes()
	res.allVAsGone = vasGone.Sub(windows[churnPhase].from)
	res.allNodesEmpty = nodesEmpty.Sub(windows[churnPhase].from)
	res.churnCPU, err = cpu()
	return err
}

// startCPU reads the controller's CPU time and returns a function that tells how
// much it has used since.
func (w *world) startCPU() (since func() (time.Duration, error), err error) {
	pid := w.ctrl.Pid()
	before, err := cpuTime(pid)
	if err != nil {
		return nil, err
	}
	return func() (time.Duration, error) {
		if err := w.exited(); err != nil {
			return 0, err
		}
		after, err := cpuTime(pid)
		return after - before, err
	}, nil
}

// attachFigures computes the attach phase's figures from the observer's times.
func (w *world) attachFigures(res *result, start time.Time) {
	for _, t := range w.observer.times(w.volumes) {
		res.allVAs = max(res.allVAs, t.va.Sub(start))
		res.allInStatus = max(res.allInStatus, t.inStatus.Sub(start))
		res.podToVA = append(res.podToVA, t.va.Sub(t.pod))
		res.attachedToStatus = append(res.attachedToStatus, t.inStatus.Sub(t.attached))
		res.podToStatus = append(res.podToStatus, t.inStatus.Sub(t.pod))
	}
	slices.Sort(res.podToVA)
	slices.Sort(res.attachedToStatus)
	slices.Sort(res.podToStatus)
}

// createPod creates a pod named pod on node that uses the claim named volume, and
// records where the volume's pod is.
func (w *world) createPod(ctx context.Context, pod, volume, node string) error {
	p := w.workload.Pod(pod, node, volume)
	if w.cfg.Objects == realisticObjects {
		dressPod(p)
	}
	if err := w.workload.CreatePod(ctx, p); err != nil {
		return err
	}
	w.podsMu.Lock()
	defer w.podsMu.Unlock()
	w.pods[volume] = placement{pod: pod, node: node}
	return nil
}

// deletePod deletes the pod of a volume at once: with no grace period the object is
// gone, so the kubelet simulator drops the volume from volumesInUse straight away.
func (w *world) deletePod(ctx context.Context, volume string) error {
	w.podsMu.Lock()
	p := w.pods[volume]
	delete(w.pods, volume)
	w.podsMu.Unlock()
	return w.workload.DeletePodNow(ctx, p.pod)
}

// exited returns why a controller that must be running ended, with the end of its
// log, or nil while they all run.
func (w *world) exited() error {
	for _, p := range w.live {
		if err := p.Exited(); err != nil {
			return fmt.Errorf("%w; log tail:\n%s", err, p.LogTail(30))
		}
	}
	return nil
}

// waitFor polls cond until it holds, failing early if the controller exits.
func (w *world) waitFor(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(context.Context) (bool, error) {
		if err := w.exited(); err != nil {
			return false, err
		}
		return cond(), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

// parallel calls f(0..n-1) from the given number of goroutines and returns the
// first error; after an error the remaining calls are skipped.
func parallel(ctx context.Context, n, workers int, f func(i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					cancel(err)
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}

// countByPhase counts the user's requests received in each phase.
func countByPhase(events []testenv.AuditEvent, user string, windows [numPhases]window) [numPhases]testenv.RequestCounts {
	var byPhase [numPhases][]testenv.AuditEvent
	for _, ev := range events {
		if ev.User != user {
			continue
		}
		for p := range numPhases {
			if windows[p].contains(ev.Received) {
				byPhase[p] = append(byPhase[p], ev)
			}
		}
	}
	var counts [numPhases]testenv.RequestCounts
	for p := range numPhases {
		counts[p] = testenv.CountRequests(byPhase[p])
	}
	return counts
}

// countRestartWrites counts, among the user's requests received from the new
// process's start to the end of the start-up window, the VolumeAttachments
// deleted, the cache probe aside, and the status writes to nodes other than
// probeNode. The old process's last
// requests, made between its SIGTERM and its exit, are the previous run's, not the
// restart's: they count in the phase's API requests only.
func countRestartWrites(events []testenv.AuditEvent, user string, startup window, probeNode string) (vaDeletes, otherNodeWrites int) {
	for _, ev := range events {
		if ev.User != user || !startup.contains(ev.Received) {
			continue
		}
		switch {
		case ev.Verb == "delete" && ev.Resource == "volumeattachments" && ev.Name != attachments.CacheProbe:
			vaDeletes++
		case (ev.Verb == "patch" || ev.Verb == "update") && ev.Resource == "nodes" && ev.Subresource == "status" && ev.Name != probeNode:
			otherNodeWrites++
		}
	}
	return vaDeletes, otherNodeWrites
}

// findFirstWrites sets each take-over's firstWrite: the first VolumeAttachment
// create or delete or node status write of the user the API server received at or
// after the new leader's spec.acquireTime.
func findFirstWrites(events []testenv.AuditEvent, user string, takeovers []takeover) {
	for i := range takeovers {
		t := &takeovers[i]
		if t.acquired.IsZero() {
			continue
		}
		for _, ev := range events {
			if ev.User != user || ev.Received.Before(t.acquired) || !attachDetachWrite(ev) {
				continue
			}
			if t.firstWrite.IsZero() || ev.Received.Before(t.firstWrite) {
				t.firstWrite = ev.Received
			}
		}
	}
}

// attachDetachWrite tells whether a request creates or deletes a VolumeAttachment
// other than the cache probe, or writes a node's status: the writes that attach
// and detach.
func attachDetachWrite(ev testenv.AuditEvent) bool {
	switch {
	case ev.Resource == "volumeattachments":
		return (ev.Verb == "create" || ev.Verb == "delete") && ev.Name != attachments.CacheProbe
	case ev.Resource == "nodes" && ev.Subresource == "status":
		return ev.Verb == "patch" || ev.Verb == "update"
	}
	return false
}
