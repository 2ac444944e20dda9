package simulation

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/internal/fakeapi"
	"github.com/attachdetach-controller/attachdetach-controller/internal/metadataview"
	"github.com/attachdetach-controller/attachdetach-controller/internal/simcheck"
	"github.com/attachdetach-controller/attachdetach-controller/internal/simtrace"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/controller"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/interleave"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
)

// controllers runs one controller incarnation after another, as a Deployment
// whose pod is killed and replaced: each on a client of its own, fenced the
// instant it is killed, so that its goroutines still winding down write nothing
// more. With the plan's leaseOverlap, an incarnation at a kill time loses its
// lease instead: its context ends but its client stays open, the next leader
// starts once the lease has expired, and every write the old one sends from the
// loss on is a violation.
type controllers struct {
	store   *fakeapi.Store
	plan    *plan
	trace   *simtrace.Trace
	checker *simcheck.Checker

	mu      sync.Mutex
	n       int
	current *incarnation
	// lingering are the incarnations that lost their lease, fenced at the end.
	lingering []*incarnation
	stopped   bool
	running   sync.WaitGroup
}

type incarnation struct {
	id     int
	client *fakeapi.Client
	cancel context.CancelFunc
}

func (cs *controllers) name(id int) string { return fmt.Sprintf("controller#%d", id) }

// start starts a new incarnation, unless one runs or the controllers are stopped.
func (cs *controllers) start() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.stopped || cs.current != nil {
		return
	}
	cs.n++
	id := cs.n
	name := cs.name(id)
	client := cs.store.NewClient(fakeapi.ClientOptions{
		Name:    name,
		Faults:  newFaults(cs.plan, id, cs.trace.Addf),
		OnCrash: func() { cs.kill(id, "killed at the instant its write was applied") },
		Logf:    cs.trace.Addf,
		OnWriteAfterStop: func(r fakeapi.Request) {
			cs.checker.Violate("INVARIANT write-after-stop: %s sent %s after its lease was lost", name, r)
		},
	})
	api := client.Interface()
	factory := controller.NewInformerFactory(api)
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), cs.trace.Logger(name, 4)))
	// Half the incarnations start as a standby does, with informers that listed
	// before the controller led: their lists prove nothing at start-up. Half of
	// those also fill their state while they wait (Prepare), as a standby does
	// once its informers synced: it follows the informers until it leads.
	var standby time.Duration
	var prepares bool
	if rng := cs.plan.rng("standby", id); rng.IntN(2) == 0 {
		standby = time.Duration(rng.Int64N(int64(3 * time.Second)))
		if err := controller.StartInformers(ctx, factory); err != nil {
			panic(fmt.Sprintf("simulation: controller.StartInformers: %v", err))
		}
		prepares = cs.plan.rng("prepares", id).IntN(2) == 0
		cs.trace.Addf("%s: informers started %s before it leads, as a standby's (state filled meanwhile: %v)", name, standby, prepares)
	}
	ctx = interleave.WithScheduler(ctx, newScheduler(cs.plan, id, ctx.Done()))
	cs.current = &incarnation{id: id, client: client, cancel: cancel}
	cs.trace.Addf("%s: starting (workers %d, status workers %d, operation timeout %s)", name, cs.plan.opts.Workers, cs.plan.opts.StatusWorkers, cs.plan.opts.OperationTimeout)
	cs.running.Go(func() {
		c, err := controller.New(controller.Clients{API: api, NodeStatus: api, Metadata: metadataview.Of(api)}, factory, recorder{trace: cs.trace, who: name}, metrics.New(), cs.plan.opts)
		if err != nil {
			panic(fmt.Sprintf("simulation: controller.New: %v", err))
		}
		prepared := make(chan error, 1)
		if prepares {
			go func() { prepared <- c.Prepare(ctx) }()
		} else {
			prepared <- nil
		}
		time.Sleep(standby)
		if err = <-prepared; err == nil {
			err = c.Run(ctx, func() {
				cs.trace.Addf("%s: ready", name)
				cs.checker.ControllerReady()
			})
		}
		cancel()
		factory.Shutdown()
		cs.trace.Addf("%s: stopped (Run returned %v)", name, err)
		if err != nil && ctx.Err() == nil {
			cs.kill(id, "Run failed")
		}
	})
}

// kill kills incarnation id if it is the one running, and starts the next one
// after a pause drawn from the seed.
func (cs *controllers) kill(id int, why string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cur := cs.current
	if cur == nil || cur.id != id {
		return
	}
	cur.client.Fence()
	cur.cancel()
	cs.current = nil
	cs.trace.Addf("%s: %s", cs.name(id), why)
	if cs.stopped {
		return
	}
	pause := time.Duration(cs.plan.rng("restart", id).Int64N(int64(5 * time.Second)))
	cs.running.Go(func() {
		time.Sleep(pause)
		cs.start()
	})
}

// loseLease makes incarnation id, if it is the one running, lose its lease: it
// stops, unfenced, and the next leader starts once the lease expired (5 s after
// the renew deadline, with the default lease duration and renew deadline) and a
// retry later.
func (cs *controllers) loseLease(id int) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cur := cs.current
	if cur == nil || cur.id != id {
		return
	}
	cur.client.Stop()
	cur.cancel()
	cs.current = nil
	cs.trace.Addf("%s: lost its lease", cs.name(id))
	if cs.stopped {
		return
	}
	pause := 5*time.Second + time.Duration(cs.plan.rng("restart", id).Int64N(int64(2*time.Second)))
	cs.lingering = append(cs.lingering, cur)
	cs.running.Go(func() {
		time.Sleep(pause)
		cs.start()
	})
}

// killCurrent kills whichever incarnation runs, or makes it lose its lease.
func (cs *controllers) killCurrent(why string) {
	cs.mu.Lock()
	cur := cs.current
	cs.mu.Unlock()
	switch {
	case cur == nil:
	case cs.plan.leaseOverlap:
		cs.loseLease(cur.id)
	default:
		cs.kill(cur.id, why)
	}
}

// stop kills the running incarnation and waits for every incarnation to end.
func (cs *controllers) stop() {
	cs.mu.Lock()
	cs.stopped = true
	cur := cs.current
	for _, old := range cs.lingering {
		old.client.Fence()
	}
	cs.mu.Unlock()
	if cur != nil {
		cs.kill(cur.id, "stopped at the end of the seed")
	}
	cs.running.Wait()
}

// recorder puts the controller's events in the trace.
type recorder struct {
	trace *simtrace.Trace
	who   string
}

func (r recorder) Event(obj runtime.Object, typ, reason, message string) {
	name := "?"
	if m, err := meta.Accessor(obj); err == nil {
		name = m.GetNamespace() + "/" + m.GetName()
	}
	r.trace.Addf("%s: event on %s: %s %s: %s", r.who, name, typ, reason, message)
}

func (r recorder) Eventf(obj runtime.Object, typ, reason, format string, args ...any) {
	r.Event(obj, typ, reason, fmt.Sprintf(format, args...))
}

func (r recorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, typ, reason, format string, args ...any) {
	r.Event(obj, typ, reason, fmt.Sprintf(format, args...))
}
