package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	rtmetrics "runtime/metrics"
	"runtime/pprof"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/internal/fakeapi"
	"github.com/attachdetach-controller/attachdetach-controller/internal/metadataview"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/controller"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
)

// suite measures the controller at each size in turn.
type suite struct {
	// Pods are the sizes: pods, each with one attached volume.
	Pods []int
	// PodsPerNode sets the nodes of a size: pods/PodsPerNode, rounded up.
	PodsPerNode int
	// Changes is how many pods the attach phase creates and the detach phase
	// deletes, Rounds times over.
	Changes, Rounds int
	// Idle is the idle window.
	Idle time.Duration
	// Timeout bounds each wait: start-up, settling, attach, detach.
	Timeout time.Duration
	// PassWait, if not 0, bounds the wait for the periodic pass before each
	// round of attaches and detaches.
	PassWait time.Duration
	// ProfileDir, if set, receives each phase's CPU profile.
	ProfileDir string
	// Workers are the simulated kubelet's and external-attacher's.
	KubeletWorkers, AttacherWorkers int
	Logger                          klog.Logger
}

// result is what one size measured. CPU figures are the controller's own (see
// cpuUse); heap figures are above the heap of the world and the simulated
// agents before the controller started.
type result struct {
	Pods, Nodes int
	// Ready is from the start to the state rebuilt (Run's onReady);
	// FirstDecision to the start-up probe's VolumeAttachment created.
	Ready, FirstDecision time.Duration
	// StartUp is from the start to settled: the probe in node status, then
	// nothing left to do (see settle). StartUpCPU is the CPU over that time.
	StartUp    time.Duration
	StartUpCPU cpuUse
	// HeapPerVolume is the live heap (after a GC) once settled, per attached
	// volume; PeakHeap the highest heap in use (live and not yet collected)
	// sampled from the start to settled. The garbage in it is what the
	// collector's pacer let build up on the whole process's heap, the world's
	// included: an upper bound of the controller's in a process of its own.
	HeapPerVolume float64
	PeakHeap      uint64
	// Changes pods were created, then deleted, Rounds times: Attach and Detach
	// are the wall times until every volume was attached (in node status), then
	// detached, summed over the rounds; their CPU runs until settled. Rounds in
	// which the periodic pass ran are not counted.
	Changes, Rounds      int
	Attach, Detach       time.Duration
	AttachCPU, DetachCPU cpuUse
	Idle                 time.Duration
	IdleCPU              cpuUse
}

// run measures every size.
func (s suite) run(ctx context.Context) ([]result, error) {
	var out []result
	for _, pods := range s.Pods {
		r, err := s.measure(ctx, pods)
		if err != nil {
			return out, fmt.Errorf("%d pods: %w", pods, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// nodesFor is the number of nodes of a size.
func (s suite) nodesFor(pods int) int {
	return max(1, (pods+s.PodsPerNode-1)/s.PodsPerNode)
}

// measure runs the phases on one size: start-up, attach and detach (Rounds
// times), idle.
func (s suite) measure(ctx context.Context, pods int) (result, error) {
	r := result{Pods: pods, Nodes: s.nodesFor(pods), Changes: s.Changes, Rounds: s.Rounds, Idle: s.Idle}
	logger := s.Logger.WithValues("pods", pods, "nodes", r.Nodes)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	logger.Info("Writing the world")
	started := time.Now()
	w, err := newWorld(pods, r.Nodes, 1+s.Changes)
	if err != nil {
		return r, err
	}
	if _, err := sim.StartKubeletOn(ctx, w.store.NewClient(fakeapi.ClientOptions{Name: "kubelet"}).Interface(),
		sim.KubeletOptions{Nodes: w.nodes, Workers: s.KubeletWorkers}); err != nil {
		return r, fmt.Errorf("starting the simulated kubelet: %w", err)
	}
	if _, err := sim.StartAttacherOn(ctx, w.store.NewClient(fakeapi.ClientOptions{Name: "external-attacher"}).Interface(),
		sim.AttacherOptions{Drivers: []string{driver}, Workers: s.AttacherWorkers}); err != nil {
		return r, fmt.Errorf("starting the simulated external-attacher: %w", err)
	}
	// The agents go through every node and VolumeAttachment once started.
	if err := poll(ctx, s.Timeout, "the agents idle", nil, nil, quiet(func() bool { return true }, new(time.Time))); err != nil {
		return r, err
	}
	baseline := liveHeap()
	logger.Info("World written, agents running", "duration", time.Since(started), "heapMiB", baseline>>20)

	c, err := s.startUp(ctx, logger, w, baseline, &r)
	if c != nil {
		defer c.stop()
	}
	if err != nil {
		return r, err
	}
	if err := s.rounds(ctx, logger, c, w, &r); err != nil {
		return r, err
	}
	if r.IdleCPU, err = s.idle(ctx, pods); err != nil {
		return r, err
	}
	logger.Info("Idle", "duration", s.Idle, "cpu", r.IdleCPU.Controller, "fakeAPICPU", r.IdleCPU.FakeAPI,
		"otherCPU", r.IdleCPU.Other, "periodicPass", r.IdleCPU.Resync)
	return r, c.stop()
}

// startUp creates a pod for a volume never attached (the probe), starts the
// controller and measures its start-up into r. It returns the controller once
// started, even with an error.
func (s suite) startUp(ctx context.Context, logger klog.Logger, w *world, baseline uint64, r *result) (*running, error) {
	probe := r.Pods
	probeVA := w.watch(probe)
	if err := w.create(w.pod(probe)); err != nil {
		return nil, err
	}
	prof, err := startCPUProfile(s.profileFile(r.Pods, "startup"))
	if err != nil {
		return nil, err
	}
	peakCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	peak := samplePeakHeap(peakCtx)
	start := time.Now()
	ready := make(chan time.Time, 1)
	c := startController(ctx, logger.WithName("controller"), w.store, func() { ready <- time.Now() })
	settled, err := s.waitStarted(ctx, c, w, ready, probe, probeVA, start, r)
	r.StartUp = settled.Sub(start)
	stopSampling()
	r.PeakHeap = uint64(max(0, int64(peak())-int64(baseline)))
	use, stopErr := prof.stop()
	if err != nil {
		return c, err
	}
	if stopErr != nil {
		return c, stopErr
	}
	r.StartUpCPU = use
	r.HeapPerVolume = float64(int64(liveHeap())-int64(baseline)) / float64(r.Pods+1)
	if err := s.writeHeapProfile(r.Pods); err != nil {
		return c, err
	}
	logger.Info("Started", "ready", r.Ready, "firstDecision", r.FirstDecision, "settled", r.StartUp,
		"cpu", r.StartUpCPU.Controller, "fakeAPICPU", r.StartUpCPU.FakeAPI, "otherCPU", r.StartUpCPU.Other,
		"heapPerVolumeKiB", r.HeapPerVolume/1024, "peakHeapMiB", r.PeakHeap>>20)
	return c, nil
}

// waitStarted waits for the controller ready, its first decision (the probe's
// VolumeAttachment created), the probe in node status and then the controller
// settled; it records the first two in r and returns when it settled.
func (s suite) waitStarted(ctx context.Context, c *running, w *world, ready <-chan time.Time, probe int, probeVA string, start time.Time, r *result) (time.Time, error) {
	if err := c.waitFor(ctx, s.Timeout, "the controller ready", func() bool { return len(ready) > 0 }); err != nil {
		return time.Time{}, err
	}
	r.Ready = (<-ready).Sub(start)
	if err := c.waitFor(ctx, s.Timeout, "the probe's VolumeAttachment", func() bool {
		_, ok := w.created(probeVA)
		return ok
	}); err != nil {
		return time.Time{}, err
	}
	at, _ := w.created(probeVA)
	r.FirstDecision = at.Sub(start)
	if err := c.waitFor(ctx, s.Timeout, "the probe in node status", func() bool {
		attached, _ := w.progress(probe, probe+1)
		return attached == 1
	}); err != nil {
		return time.Time{}, err
	}
	return c.settle(ctx, s.Timeout)
}

// rounds attaches, then detaches, the spare volumes but the probe's, Rounds
// times, into r; a round in which the periodic pass ran is measured again.
func (s suite) rounds(ctx context.Context, logger klog.Logger, c *running, w *world, r *result) error {
	first, end := r.Pods+1, r.Pods+1+s.Changes
	for counted, n := 0, 1; counted < s.Rounds; n++ {
		if n > s.Rounds+maxRepeatedRounds {
			return fmt.Errorf("the periodic pass ran in %d of %d rounds of attaches and detaches", n-1-counted, n-1)
		}
		if err := c.awaitPeriodicPass(ctx, s.PassWait, s.Timeout); err != nil {
			return err
		}
		rd, err := s.round(ctx, c, w, r.Pods, n, first, end)
		if err != nil {
			return err
		}
		repeat := rd.attachCPU.Resync || rd.detachCPU.Resync
		logger.Info("Attached and detached", "round", n, "volumes", s.Changes,
			"attach", rd.attach, "attachCPU", rd.attachCPU.Controller, "attachFakeAPICPU", rd.attachCPU.FakeAPI, "attachOtherCPU", rd.attachCPU.Other,
			"detach", rd.detach, "detachCPU", rd.detachCPU.Controller, "detachFakeAPICPU", rd.detachCPU.FakeAPI, "detachOtherCPU", rd.detachCPU.Other,
			"periodicPass", repeat)
		if repeat {
			continue
		}
		counted++
		r.Attach += rd.attach
		r.Detach += rd.detach
		r.AttachCPU = r.AttachCPU.add(rd.attachCPU)
		r.DetachCPU = r.DetachCPU.add(rd.detachCPU)
	}
	return nil
}

// idle profiles the CPU over the idle window.
func (s suite) idle(ctx context.Context, pods int) (cpuUse, error) {
	prof, err := startCPUProfile(s.profileFile(pods, "idle"))
	if err != nil {
		return cpuUse{}, err
	}
	select {
	case <-ctx.Done():
		err = ctx.Err()
	case <-time.After(s.Idle):
	}
	use, stopErr := prof.stop()
	if err != nil {
		return use, err
	}
	return use, stopErr
}

// maxRepeatedRounds bounds the rounds measured again because the periodic pass
// ran in them: each starts right after a pass (awaitPeriodicPass), and the next
// comes a minute later.
const maxRepeatedRounds = 3

// round is one round of attaches and detaches.
type round struct {
	attach, detach       time.Duration
	attachCPU, detachCPU cpuUse
}

// round creates the pods of the volumes first..end-1 until all are attached,
// then deletes them until all are detached.
func (s suite) round(ctx context.Context, c *running, w *world, pods, n, first, end int) (round, error) {
	var rd round
	var err error
	rd.attach, rd.attachCPU, err = s.phase(ctx, c, fmt.Sprintf("attach-%d", n), pods, func() error {
		for i := first; i < end; i++ {
			if err := w.create(w.pod(i)); err != nil {
				return err
			}
		}
		return nil
	}, func() bool { attached, _ := w.progress(first, end); return attached == end-first })
	if err != nil {
		return rd, err
	}
	rd.detach, rd.detachCPU, err = s.phase(ctx, c, fmt.Sprintf("detach-%d", n), pods, func() error {
		for i := first; i < end; i++ {
			if err := w.store.Delete(setupActor, fakeapi.Ref{Resource: fakeapi.Pods, Namespace: namespace, Name: w.pod(i).Name}); err != nil {
				return fmt.Errorf("deleting pod %d: %w", i, err)
			}
		}
		return nil
	}, func() bool { _, detached := w.progress(first, end); return detached == end-first })
	return rd, err
}

// phase profiles the CPU from do until the controller settled once done holds,
// and returns the time until done held.
func (s suite) phase(ctx context.Context, c *running, name string, pods int, do func() error, done func() bool) (time.Duration, cpuUse, error) {
	prof, err := startCPUProfile(s.profileFile(pods, name))
	if err != nil {
		return 0, cpuUse{}, err
	}
	start := time.Now()
	err = do()
	if err == nil {
		err = c.waitFor(ctx, s.Timeout, name+" done", done)
	}
	took := time.Since(start)
	if err == nil {
		_, err = c.settle(ctx, s.Timeout)
	}
	use, stopErr := prof.stop()
	if err == nil {
		err = stopErr
	}
	return took, use, err
}

func (s suite) profileFile(pods int, phase string) string {
	if s.ProfileDir == "" {
		return ""
	}
	return filepath.Join(s.ProfileDir, fmt.Sprintf("cpu-%d-pods-%s.pprof", pods, phase))
}

// writeHeapProfile writes the heap profile as of the last garbage collection
// into ProfileDir, if set: heap-<pods>-pods-settled.pprof.
func (s suite) writeHeapProfile(pods int) error {
	if s.ProfileDir == "" {
		return nil
	}
	if err := os.MkdirAll(s.ProfileDir, 0o755); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := pprof.WriteHeapProfile(&buf); err != nil {
		return fmt.Errorf("taking the heap profile: %w", err)
	}
	return os.WriteFile(filepath.Join(s.ProfileDir, fmt.Sprintf("heap-%d-pods-settled.pprof", pods)), buf.Bytes(), 0o644)
}

// running is a controller started by startController.
type running struct {
	metrics *metrics.Metrics
	cancel  context.CancelFunc
	done    chan struct{}
	// err is what Run returned, once done is closed.
	err error
}

// startController runs the controller, with its defaults, on a client of its
// own; its goroutines carry the controller's pprof label.
func startController(ctx context.Context, logger klog.Logger, store *fakeapi.Store, onReady func()) *running {
	api := store.NewClient(fakeapi.ClientOptions{Name: controllerName}).Interface()
	c := &running{metrics: metrics.New(), done: make(chan struct{})}
	ctx, c.cancel = context.WithCancel(klog.NewContext(ctx, logger))
	go withControllerLabel(ctx, func(ctx context.Context) {
		defer close(c.done)
		factory := controller.NewInformerFactory(api)
		defer factory.Shutdown()
		ctrl, err := controller.New(controller.Clients{API: api, NodeStatus: api, Metadata: metadataview.Of(api)}, factory, &record.FakeRecorder{}, c.metrics, controller.DefaultOptions())
		if err != nil {
			c.err = fmt.Errorf("building the controller: %w", err)
			return
		}
		if err := ctrl.Run(ctx, onReady); err != nil {
			c.err = fmt.Errorf("the controller stopped: %w", err)
		}
	})
	return c
}

// stop stops the controller and returns what Run returned.
func (c *running) stop() error {
	c.cancel()
	<-c.done
	return c.err
}

// waitFor polls cond until it holds, failing if the controller stops first or
// timeout passes.
func (c *running) waitFor(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	return poll(ctx, timeout, what, c.done, func() error { return fmt.Errorf("the controller stopped: %v", c.err) }, cond)
}

// poll polls cond every 50 ms until it holds, failing with stopErr once stopped
// is closed (never if nil), or once timeout passed.
func poll(ctx context.Context, timeout time.Duration, what string, stopped <-chan struct{}, stopErr func() error, cond func() bool) error {
	deadline := time.After(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-stopped:
			return fmt.Errorf("waiting for %s: %w", what, stopErr())
		case <-deadline:
			return fmt.Errorf("waiting for %s: %w within %s", what, errTimedOut, timeout)
		case <-tick.C:
		}
	}
	return nil
}

// errTimedOut is what poll returns once its time is up.
var errTimedOut = errors.New("not done")

// passPolls is how many polls in a row must find the process busy for the
// periodic pass to be seen: a goroutine woken for a moment is not it.
const passPolls = 3

// awaitPeriodicPass waits, at most within (none if 0), for the controller's
// periodic pass to come and go: the process busy (passPolls polls in a row),
// then settled again. A round
// of attaches and detaches that starts then has a minute without the pass. A
// pass too short to be seen costs too little to matter: the wait then ends
// after within.
func (c *running) awaitPeriodicPass(ctx context.Context, within, timeout time.Duration) error {
	if within == 0 {
		return nil
	}
	busy, seen := 0, false
	err := c.waitFor(ctx, within, "the periodic pass", func() bool {
		if busyGoroutines() > 1 {
			busy++
			seen = seen || busy >= passPolls
			return false
		}
		busy = 0
		return seen
	})
	if err != nil && !errors.Is(err, errTimedOut) {
		return err
	}
	_, err = c.settle(ctx, timeout)
	return err
}

// reconcileQueueMetric is the controller's gauge of volumes waiting to be
// reconciled.
const reconcileQueueMetric = "attachdetach_controller_reconcile_queue_length"

// quietPolls is how many polls in a row must find the process quiet.
const quietPolls = 10

// settle waits until the controller has nothing left to do: its reconcile queue
// empty and the process quiet (see quiet). The simulated agents have nothing to
// do either once the controller writes nothing. It returns when the quiet
// began.
func (c *running) settle(ctx context.Context, timeout time.Duration) (time.Time, error) {
	var since time.Time
	err := c.waitFor(ctx, timeout, "the controller settled", quiet(c.queueEmpty, &since))
	return since, err
}

// quiet returns a condition to poll that holds once, quietPolls polls in a row,
// also held and no goroutine of the process but the polling one ran or waited
// to run; since is set to the first of those polls.
func quiet(also func() bool, since *time.Time) func() bool {
	n := 0
	return func() bool {
		// also may be dear (the controller's metrics gather its whole
		// state): it is asked only once the process is quiet.
		if busyGoroutines() > 1 || !also() {
			n = 0
			return false
		}
		if n == 0 {
			*since = time.Now()
		}
		n++
		return n >= quietPolls
	}
}

// The scheduler's counts of goroutines running and waiting to run.
var busyMetrics = []string{"/sched/goroutines/running:goroutines", "/sched/goroutines/runnable:goroutines"}

// busyGoroutines returns how many goroutines run or wait to run.
func busyGoroutines() uint64 {
	samples := make([]rtmetrics.Sample, len(busyMetrics))
	for i, name := range busyMetrics {
		samples[i].Name = name
	}
	rtmetrics.Read(samples)
	var n uint64
	for _, s := range samples {
		n += s.Value.Uint64()
	}
	return n
}

// queueEmpty tells whether the controller's reconcile queue is empty.
func (c *running) queueEmpty() bool {
	families, err := c.metrics.Registry.Gather()
	if err != nil {
		return false
	}
	for _, f := range families {
		if f.GetName() == reconcileQueueMetric {
			return len(f.GetMetric()) == 1 && f.GetMetric()[0].GetGauge().GetValue() == 0
		}
	}
	return false
}

// liveHeap returns the heap's live bytes, right after a garbage collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// heapObjectsMetric is the heap in use by objects, live or not yet collected.
const heapObjectsMetric = "/memory/classes/heap/objects:bytes"

// samplePeakHeap samples the heap in use every 20 ms until ctx ends, and
// returns a function reading the highest sample so far.
func samplePeakHeap(ctx context.Context) func() uint64 {
	var peak atomic.Uint64
	sample := []rtmetrics.Sample{{Name: heapObjectsMetric}}
	read := func() {
		rtmetrics.Read(sample)
		if v := sample[0].Value.Uint64(); v > peak.Load() {
			peak.Store(v)
		}
	}
	read()
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				read()
			}
		}
	}()
	return peak.Load
}
