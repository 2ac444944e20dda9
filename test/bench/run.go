package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/attachdetach-controller/attachdetach-controller/internal/proc"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

const (
	namespace = "bench"
	driver    = "bench.csi.example.com"
	// probe is the volume attached and detached once before measuring, to know the
	// controller is up and working.
	probe = "probe"
	// startupTimeout bounds the controller's start, up to the probe being detached.
	startupTimeout = 2 * time.Minute
	// stopGracePeriod is how long a controller gets to stop after SIGTERM.
	stopGracePeriod = 10 * time.Second
	pollInterval    = 10 * time.Millisecond
	// attachedReason is the reason of the event both controllers put on a pod once
	// its volume is attached.
	attachedReason = "SuccessfulAttachVolume"
	// eventsQuiet ends the wait for attach events when some never come.
	eventsQuiet = 5 * time.Second
)

// runConfig is one controller on one workload at one rate limit.
type runConfig struct {
	Controller  controllerKind
	Executables executables
	Rate        rate
	Volumes     int
	Nodes       int
	// Idle is how long every volume stays attached with nothing happening.
	Idle time.Duration
	// PhaseTimeout bounds the attach and the churn phase each.
	PhaseTimeout time.Duration
	// AttacherWorkers and KubeletWorkers size the simulators; Clients is how many
	// requests the load generator has in flight.
	AttacherWorkers, KubeletWorkers, Clients int
	// Dir holds the controller's kubeconfig and log.
	Dir string
}

// phase is a measured part of a run. The attach phase's requests include the
// SuccessfulAttachVolume events written after the last volume reached node status:
// the idle phase starts once they are in.
type phase int

const (
	attachPhase phase = iota
	idlePhase
	churnPhase
	numPhases
)

func (p phase) String() string {
	return [...]string{"attach", "idle", "churn"}[p]
}

// result is what one run measured.
type result struct {
	cfg runConfig
	// Attach: from the first pod creation to the last VolumeAttachment first seen
	// and to the last volume first seen in node status; per-volume latencies, sorted.
	allVAs, allInStatus                    time.Duration
	podToVA, attachedToStatus, podToStatus []time.Duration
	// Steady: CPU used during the idle period and peak RSS at its end.
	idleCPU time.Duration
	peakRSS int64
	// Churn: from the first pod deletion to the last VolumeAttachment gone and to
	// the last node status emptied.
	allVAsGone, allNodesEmpty time.Duration
	// requests are the controller user's requests in each phase.
	requests [numPhases]testenv.RequestCounts
}

// world is a fresh control plane with the simulators, the observer and the
// benchmark's volumes, around one controller process.
type world struct {
	cfg      runConfig
	env      *testenv.Env
	client   kubernetes.Interface
	workload *workload.Workload
	nodes    []string
	volumes  []string
	observer *observer
	ctrl     *proc.Process
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
		cfg:      cfg,
		env:      env,
		client:   env.Client,
		workload: &workload.Workload{Client: env.Client, Namespace: namespace, Driver: driver},
	}
	if err := w.setUp(ctx); err != nil {
		return nil, err
	}
	if err := w.startController(token); err != nil {
		return nil, err
	}
	defer func() {
		_ = w.ctrl.Stop(stopGracePeriod)
		if err != nil {
			err = fmt.Errorf("%w\ncontroller log: %s", err, w.ctrl.LogPath())
		}
	}()
	if err := w.warmUp(ctx); err != nil {
		return nil, err
	}
	res = &result{cfg: cfg}
	bounds, err := w.measure(ctx, res)
	if err != nil {
		return nil, err
	}
	if err := w.ctrl.Stop(stopGracePeriod); err != nil {
		return nil, err
	}
	events, err := env.AuditEvents()
	if err != nil {
		return nil, err
	}
	res.requests = countByPhase(events, user, bounds)
	return res, nil
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
		w.nodes = append(w.nodes, fmt.Sprintf("node-%03d", i))
	}
	for i := range w.cfg.Volumes {
		w.volumes = append(w.volumes, fmt.Sprintf("vol-%05d", i))
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
	all := append([]string{probe}, w.volumes...)
	return parallel(ctx, len(all), w.cfg.Clients, func(i int) error {
		_, err := w.workload.CreateVolume(ctx, all[i], workload.VolumeOptions{})
		return err
	})
}

func (w *world) startController(token string) error {
	kubeconfig := filepath.Join(w.cfg.Dir, "kubeconfig")
	if err := w.env.WriteKubeconfig(kubeconfig, token); err != nil {
		return err
	}
	binary := w.cfg.Executables.this
	if w.cfg.Controller == upstreamController {
		binary = w.cfg.Executables.upstream
	}
	var err error
	w.ctrl, err = proc.Start(string(w.cfg.Controller)+" controller", filepath.Join(w.cfg.Dir, "controller.log"), binary,
		controllerArgs(w.cfg.Controller, kubeconfig, w.cfg.Rate)...)
	return err
}

// warmUp attaches and detaches the probe volume: the controller is then up, synced
// and working.
func (w *world) warmUp(ctx context.Context) error {
	if err := w.createPod(ctx, probe, w.nodes[0]); err != nil {
		return err
	}
	if err := w.waitFor(ctx, startupTimeout, "the probe volume to be attached", func() bool {
		return w.observer.allInStatus([]string{probe})
	}); err != nil {
		return err
	}
	if err := w.deletePod(ctx, probe); err != nil {
		return err
	}
	return w.waitFor(ctx, startupTimeout, "the probe volume to be detached", w.observer.allGone)
}

// measure runs the attach, idle and churn phases and returns the start of each and
// the end of the last.
func (w *world) measure(ctx context.Context, res *result) ([numPhases + 1]time.Time, error) {
	var bounds [numPhases + 1]time.Time
	pid := w.ctrl.Pid()

	bounds[attachPhase] = time.Now()
	if err := parallel(ctx, len(w.volumes), w.cfg.Clients, func(i int) error {
		return w.createPod(ctx, w.volumes[i], w.nodes[i%len(w.nodes)])
	}); err != nil {
		return bounds, err
	}
	if err := w.waitFor(ctx, w.cfg.PhaseTimeout, "every volume in node status", func() bool {
		return w.observer.allInStatus(w.volumes)
	}); err != nil {
		return bounds, err
	}
	attached := time.Now()
	w.attachFigures(res, bounds[attachPhase])
	if err := w.waitFor(ctx, w.cfg.PhaseTimeout, "the SuccessfulAttachVolume events", func() bool {
		return w.observer.eventsSettled(w.volumes, attached, eventsQuiet)
	}); err != nil {
		return bounds, err
	}
	bounds[idlePhase] = time.Now()

	cpuBefore, err := cpuTime(pid)
	if err != nil {
		return bounds, err
	}
	select {
	case <-ctx.Done():
		return bounds, ctx.Err()
	case <-time.After(w.cfg.Idle):
	}
	if err := w.exited(); err != nil {
		return bounds, err
	}
	cpuAfter, err := cpuTime(pid)
	if err != nil {
		return bounds, err
	}
	res.idleCPU = cpuAfter - cpuBefore
	if res.peakRSS, err = peakRSS(pid); err != nil {
		return bounds, err
	}

	bounds[churnPhase] = time.Now()
	if err := parallel(ctx, len(w.volumes), w.cfg.Clients, func(i int) error {
		return w.deletePod(ctx, w.volumes[i])
	}); err != nil {
		return bounds, err
	}
	if err := w.waitFor(ctx, w.cfg.PhaseTimeout, "every VolumeAttachment gone and every node status empty", w.observer.allGone); err != nil {
		return bounds, err
	}
	bounds[numPhases] = time.Now()
	vasGone, nodesEmpty := w.observer.goneTimes()
	res.allVAsGone = vasGone.Sub(bounds[churnPhase])
	res.allNodesEmpty = nodesEmpty.Sub(bounds[churnPhase])
	return bounds, nil
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

// createPod creates a pod on node that uses the claim named volume.
func (w *world) createPod(ctx context.Context, volume, node string) error {
	return w.workload.CreatePod(ctx, w.workload.Pod(volume, node, volume))
}

// deletePod deletes a pod at once: with no grace period the object is gone, so the
// kubelet simulator drops its volume from volumesInUse straight away.
func (w *world) deletePod(ctx context.Context, name string) error {
	return w.workload.DeletePodNow(ctx, name)
}

// exited returns why the controller ended, with the end of its log, or nil while it
// runs.
func (w *world) exited() error {
	if err := w.ctrl.Exited(); err != nil {
		return fmt.Errorf("%w; log tail:\n%s", err, w.ctrl.LogTail(30))
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
func countByPhase(events []testenv.AuditEvent, user string, bounds [numPhases + 1]time.Time) [numPhases]testenv.RequestCounts {
	var byPhase [numPhases][]testenv.AuditEvent
	for _, ev := range events {
		if ev.User != user {
			continue
		}
		for p := range numPhases {
			if !ev.Received.Before(bounds[p]) && ev.Received.Before(bounds[p+1]) {
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
