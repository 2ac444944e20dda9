package simulation

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/internal/fakeapi"
	"github.com/attachdetach-controller/attachdetach-controller/internal/safetyrules"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
	"github.com/attachdetach-controller/attachdetach-controller/internal/simcheck"
	"github.com/attachdetach-controller/attachdetach-controller/internal/simtrace"
	"github.com/attachdetach-controller/attachdetach-controller/internal/simworld"
)

var (
	seedFlag  = flag.Int64("seed", -1, "run only this seed")
	seedsFlag = flag.Int("seeds", 2000, "number of seeds to run, from -first (200 with -short unless set)")
	firstFlag = flag.Int64("first", 1, "first seed")
	traceFlag = flag.Int("trace", 400, "trace lines printed for a failing seed: the last ones, or those before its first violation")
	stallFlag = flag.Duration("stall", 2*time.Minute, "real time after which a seed that has not finished is reported as stalled, and the test binary stops")
)

// convergeWithin bounds the simulated time a seed gets, once the world stopped
// changing, to reach the state a correct controller converges to.
const convergeWithin = 10 * time.Minute

func TestMain(m *testing.M) {
	flag.Parse()
	// The controller logs to each seed's trace; client-go's own logs go nowhere.
	klog.SetLogger(logr.Discard())
	// The default error handler sleeps between errors according to a global
	// clock reading, which a clock of another bubble makes a sleep for ever.
	utilruntime.ErrorHandlers = []utilruntime.ErrorHandler{
		func(ctx context.Context, err error, msg string, keysAndValues ...any) {
			klog.FromContext(ctx).Error(err, msg, keysAndValues...)
		},
	}
	os.Exit(m.Run())
}

func TestSimulation(t *testing.T) {
	if *seedFlag >= 0 {
		runSeeds(t, *seedFlag, 1)
		return
	}
	n := int64(*seedsFlag)
	if testing.Short() && !flagSet("seeds") {
		n = 200
	}
	// Batches of parallel seeds, one batch after the other, so that a soak does
	// not start a hundred thousand subtests at once.
	const batch = 1000
	for first := *firstFlag; first < *firstFlag+n; first += batch {
		count := min(batch, *firstFlag+n-first)
		t.Run(fmt.Sprintf("seeds=%d-%d", first, first+count-1), func(t *testing.T) { runSeeds(t, first, count) })
	}
}

// runSeeds runs count seeds from first in parallel subtests.
func runSeeds(t *testing.T, first, count int64) {
	for seed := first; seed < first+count; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			var trace atomic.Pointer[simtrace.Trace]
			watchdog := time.AfterFunc(*stallFlag, func() {
				// Simulated time stops if a goroutine waits on a mutex held by one
				// that sleeps: nothing in the bubble can end the seed then.
				debug.SetTraceback("all")
				panic(fmt.Sprintf("seed %d stalled: no progress for %s of real time (a goroutine waiting on a mutex whose holder waits for simulated time?)\ntrace:\n%s\nrun it again: go test ./test/simulation -run TestSimulation -seed=%d -v (-count=500 if it passes, about 30 s: what runs between meeting points within one instant is not reproducible, and a seed of the CI run may fail in 1 run of 500)",
					seed, *stallFlag, trace.Load(), seed))
			})
			defer watchdog.Stop()
			defer func() {
				// synctest.Test panics if goroutines of the bubble are still
				// blocked once the seed ended: something the controller started
				// was never stopped.
				if r := recover(); r != nil {
					t.Errorf("seed %d: %v\ntrace (last %d lines):\n%s\n%s\nrun it again: go test ./test/simulation -run TestSimulation -seed=%d -v (-count=500 if it passes, about 30 s: what runs between meeting points within one instant is not reproducible, and a seed of the CI run may fail in 1 run of 500)",
						seed, r, *traceFlag, trace.Load(), leftovers(), seed)
				}
			}()
			synctest.Test(t, func(t *testing.T) { runSeed(t, seed, &trace) })
		})
	}
}

// leftovers returns, when one seed runs alone, the stacks of every goroutine:
// those a seed left blocked are among them.
func leftovers() string {
	if *seedFlag < 0 {
		return "(run the seed alone to see the stacks of the goroutines left)"
	}
	buf := make([]byte, 1<<20)
	return "goroutines:\n" + string(buf[:runtime.Stack(buf, true)])
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// runSeed runs one seed: the world changes for a while under faults and
// controller kills, every write checked; then faults and changes stop and the
// controller must converge.
func runSeed(t *testing.T, seed int64, shared *atomic.Pointer[simtrace.Trace]) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	p := newPlan(uint64(seed), rng)
	trace := simtrace.New(*traceFlag)
	shared.Store(trace)
	mounts := sim.NewMounts()
	checker := simcheck.New(safetyrules.Settings{
		MaxWait: p.opts.MaxWaitForUnmount, Grace: p.maxDelay,
		NeverForce:            p.neverForced,
		DetachOnShutdownTaint: p.opts.DetachOnShutdownTaint,
	}, mounts, func(v string) {
		// The seed runs on for up to a second after a violation: the trace keeps
		// what led to the first one.
		trace.Addf("%s", v)
		trace.Hold()
	})
	store := fakeapi.NewStore(func(r fakeapi.Reader, w fakeapi.Write) {
		trace.Addf("write: %s", describeWrite(w))
		checker.Observe(r, w)
	})
	trace.Addf("seed %d: %s", seed, p.describe())
	world := simworld.New(store, mounts, rng, simworld.Config{
		Nodes: p.nodes, Volumes: p.volumes,
		AttachFailure: p.attachFailure, DetachFailure: p.detachFailure, SlowAttach: p.slowAttach,
		Copies: p.copies,
		Settle: synctest.Wait,
		Logf:   trace.Addf,
	})
	ctx, stopWorld := context.WithCancel(klog.NewContext(t.Context(), trace.Logger("world", 2)))
	defer stopWorld()
	if err := world.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cs := &controllers{store: store, plan: p, trace: trace, checker: checker}
	cs.start()
	for _, at := range p.kills {
		world.After(at, func() { cs.killCurrent("killed at a set time") })
	}

	start := time.Now()
	failed := func() bool { return len(checker.Violations()) > 0 }
	for time.Since(start) < p.workload && !failed() {
		world.RunUntil(time.Now().Add(time.Second))
	}
	var diffs []string
	if !failed() {
		world.StopChanges()
		p.faultsOn.Store(false)
		trace.Addf("faults stop")
		diffs = converge(world, store, cs, p, failed)
	}
	cs.stop()
	var state string
	store.Read(func(r fakeapi.Reader) { state = simcheck.Describe(r) })

	if v := checker.Violations(); len(v) > 0 || len(diffs) > 0 {
		var b strings.Builder
		for _, msg := range v {
			fmt.Fprintf(&b, "%s\n", msg)
		}
		if len(diffs) > 0 {
			fmt.Fprintf(&b, "CONVERGENCE: not converged %s after changes stopped:\n  %s\n", convergeWithin, strings.Join(diffs, "\n  "))
		}
		t.Errorf("seed %d failed:\n%s\ntrace (%d lines, up to the first violation if any):\n%s\nstate at the end:\n%s\nrun it again: go test ./test/simulation -run TestSimulation -seed=%d -v (-count=500 if it passes, about 30 s: what runs between meeting points within one instant is not reproducible, and a seed of the CI run may fail in 1 run of 500)",
			seed, b.String(), *traceFlag, trace.String(), state, seed)
	}
}

// converge lets the world run until the API is in the converged state at two
// checks 5 s apart, and returns what still differs if it is not by the deadline.
func converge(world *simworld.World, store *fakeapi.Store, cs *controllers, p *plan, failed func() bool) []string {
	deadline := time.Now().Add(convergeWithin)
	var diffs []string
	streak := 0
	for time.Now().Before(deadline) && !failed() {
		cs.start()
		world.RunUntil(time.Now().Add(5 * time.Second))
		store.Read(func(r fakeapi.Reader) { diffs = simcheck.Converged(r, p.neverForced) })
		if len(diffs) > 0 {
			streak = 0
			continue
		}
		if streak++; streak == 2 {
			return nil
		}
	}
	return diffs
}

// describeWrite is one line of the trace for a write.
func describeWrite(w fakeapi.Write) string {
	s := fmt.Sprintf("%s %s %s", w.Actor, w.Verb, w.Ref)
	if node, ok := w.New.(*corev1.Node); ok && strings.HasPrefix(w.Actor, "controller") {
		return s + fmt.Sprintf(" [volumesAttached=%v]", node.Status.VolumesAttached)
	}
	va, ok := w.New.(*storagev1.VolumeAttachment)
	if !ok {
		va, ok = w.Old.(*storagev1.VolumeAttachment)
		if ok && w.New == nil {
			return s + " (removed)"
		}
	}
	if ok {
		pv := ""
		if va.Spec.Source.PersistentVolumeName != nil {
			pv = *va.Spec.Source.PersistentVolumeName
		}
		s += fmt.Sprintf(" [%s on %s attached=%v deleting=%v finalizers=%v]", pv, va.Spec.NodeName, va.Status.Attached, va.DeletionTimestamp != nil, va.Finalizers)
	}
	return s
}
