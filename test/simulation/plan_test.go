package simulation

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/attachdetach-controller/attachdetach-controller/internal/fakeapi"
	"github.com/attachdetach-controller/attachdetach-controller/internal/simworld"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/controller"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/reconciler"
)

// plan is what a seed draws before it starts: the size of the world, how long it
// changes, the controller's configuration and options, when it is killed or
// loses its lease, and how often faults strike.
type plan struct {
	seed           uint64
	nodes, volumes int
	workload       time.Duration
	opts           controller.Options
	// kills are the times, from the start, at which the running controller is
	// killed, or, with leaseOverlap, loses its lease.
	kills []time.Duration
	// leaseOverlap: at the kill times the controller loses its lease instead of
	// dying; it winds down while the next leader starts (after the lease
	// expires), and every write it sends after the loss is a violation.
	leaseOverlap bool
	// neverForce: the simulated CSI driver's volumes are never force-detached on
	// the unmount timeout (--max-wait-for-unmount-per-driver=driver=never).
	neverForce bool
	// requestFaults is the odds of a fault on a controller write; crashes the
	// odds that such a fault kills the controller at the write.
	requestFaults, crashes float64
	// readFaults is the odds of a fault on a read (get, list); outages the odds
	// that a write whose outcome is unknown starts a time, up to maxOutage, in
	// which every read of that resource fails.
	readFaults, outages float64
	maxOutage           time.Duration
	// maxDelay bounds the delay of a request before it is applied.
	maxDelay time.Duration
	// maxListLag bounds how far in the past a new incarnation's informers'
	// first lists are served from; maxHold how long, from its start, each of its
	// informers' first watch holds back the changes made before.
	maxListLag, maxHold time.Duration
	// delayEvents, resumeWatch and expireWatch are the odds, per watch event, of a
	// delay (up to maxEventDelay), a clean end of the watch, and a 410 Gone.
	delayEvents, resumeWatch, expireWatch float64
	maxEventDelay                         time.Duration
	attachFailure, detachFailure          float64
	slowAttach                            time.Duration
	// copies is the odds that a workload step copies a VolumeAttachment, as
	// another tool would.
	copies float64
	// stir is the odds that a goroutine at a meeting point sleeps rather than
	// yields; long the odds that the sleep is a long one.
	stir, long float64
	// faultsOn turns every fault off once the world stops changing.
	faultsOn atomic.Bool
}

func newPlan(seed uint64, rng *rand.Rand) *plan {
	pick := func(xs ...float64) float64 { return xs[rng.IntN(len(xs))] }
	p := &plan{
		seed:          seed,
		nodes:         2 + rng.IntN(3),
		volumes:       3 + rng.IntN(4),
		workload:      time.Duration(60+rng.IntN(180)) * time.Second,
		requestFaults: pick(0, 0.05, 0.15, 0.3),
		crashes:       pick(0, 0.1, 0.3),
		maxDelay:      5 * time.Second,
		delayEvents:   pick(0, 0.1, 0.5),
		resumeWatch:   pick(0, 0.02),
		expireWatch:   pick(0, 0.01, 0.05),
		maxEventDelay: time.Duration(1+rng.IntN(5)) * time.Second,
		attachFailure: pick(0, 0.1, 0.3),
		detachFailure: pick(0, 0.1, 0.3),
		slowAttach:    time.Duration(10+rng.IntN(60)) * time.Second,
	}
	p.opts = controller.DefaultOptions()
	p.opts.MaxWaitForUnmount = 30 * time.Second
	p.opts.OperationTimeout = time.Duration(20+rng.IntN(40)) * time.Second
	p.opts.Workers = 1 + rng.IntN(4)
	p.opts.StatusWorkers = 1 + rng.IntN(2)
	for range rng.IntN(4) {
		p.kills = append(p.kills, time.Duration(rng.Int64N(int64(p.workload))))
	}
	// The configuration: each setting on or off by the seed.
	p.opts.DisableSync = rng.IntN(4) == 0
	p.neverForce = rng.IntN(4) == 0
	if p.neverForce {
		p.opts.MaxWaitForUnmountPerDriver = map[string]reconciler.DriverUnmountPolicy{simworld.Driver: {NeverForce: true}}
	}
	p.opts.DetachOnShutdownTaint = rng.IntN(4) == 0
	p.leaseOverlap = rng.IntN(3) == 0
	p.readFaults = pick(0, 0.05, 0.15)
	p.outages = pick(0, 0.3, 0.8)
	p.maxOutage = time.Duration(10+rng.IntN(80)) * time.Second
	p.maxListLag = time.Duration(pick(0, 5, 30)) * time.Second
	p.maxHold = time.Duration(pick(0, 3, 15)) * time.Second
	p.copies = pick(0, 0, 0.05, 0.2)
	p.stir = pick(0.1, 0.5, 0.9)
	p.long = pick(0, 0.02, 0.1)
	p.faultsOn.Store(true)
	return p
}

// neverForced tells whether the volume is never force-detached on the timeout.
func (p *plan) neverForced(volume string) bool {
	return p.neverForce && strings.HasPrefix(volume, "kubernetes.io/csi/"+simworld.Driver+"^")
}

// describe is the trace's line about the plan.
func (p *plan) describe() string {
	var settings []string
	add := func(on bool, s string) {
		if on {
			settings = append(settings, s)
		}
	}
	add(p.opts.DisableSync, "--disable-attach-detach-reconcile-sync")
	add(p.neverForce, "driver "+simworld.Driver+" never force-detached")
	add(p.opts.DetachOnShutdownTaint, "--detach-on-shutdown-taint")
	add(p.leaseOverlap, "leases lost, leaders overlap")
	if len(settings) == 0 {
		settings = append(settings, "defaults")
	}
	return fmt.Sprintf("%d nodes, %d volumes, changes for %s; %s; request faults %.2f (crashes %.2f), read faults %.2f, outages %.1f (up to %s), list lag up to %s, watch hold up to %s, event delays %.2f (up to %s), watch resumes %.2f, expiries %.2f, attach/detach failures %.1f/%.1f, copies %.2f, meeting points stirred %.1f (long %.2f), kills at %v",
		p.nodes, p.volumes, p.workload, strings.Join(settings, ", "), p.requestFaults, p.crashes, p.readFaults, p.outages, p.maxOutage, p.maxListLag, p.maxHold,
		p.delayEvents, p.maxEventDelay, p.resumeWatch, p.expireWatch, p.attachFailure, p.detachFailure, p.copies, p.stir, p.long, p.kills)
}

// rng returns a generator drawn from the seed and the parts, so that a decision
// depends on what it is about, not on when goroutines ask for it.
func (p *plan) rng(parts ...any) *rand.Rand {
	h := fnv.New64a()
	for _, part := range parts {
		fmt.Fprintf(h, "%v\x00", part)
	}
	return rand.New(rand.NewPCG(p.seed, h.Sum64()))
}

// faults are the faults of one controller incarnation. Each decision is drawn
// from the seed, the incarnation and the identity of the request or event, so
// that it does not depend on the order in which goroutines send requests.
type faults struct {
	p           *plan
	incarnation int
	// started is when the incarnation started: its informers' first watches
	// hold back the changes made before, each for its own time from then.
	started time.Time
	logf    func(format string, args ...any)

	mu sync.Mutex
	// outage is, by resource, until when every read of it fails.
	outage map[string]time.Time
}

func newFaults(p *plan, incarnation int, logf func(string, ...any)) *faults {
	return &faults{p: p, incarnation: incarnation, started: time.Now(), logf: logf, outage: map[string]time.Time{}}
}

func (f *faults) rng(parts ...any) *rand.Rand {
	return f.p.rng(append([]any{f.incarnation}, parts...)...)
}

var (
	errInternal = apierrors.NewInternalError(errors.New("simulated etcd failure"))
	errThrottle = apierrors.NewTooManyRequests("simulated throttling", 1)
	errTimeout  = apierrors.NewTimeoutError("simulated request timeout", 1)
	errLost     = errors.New("http2: client connection lost (simulated)")
)

// Request decides the fault of a controller request.
func (f *faults) Request(r fakeapi.Request) fakeapi.Fault {
	if !f.p.faultsOn.Load() {
		return fakeapi.Fault{}
	}
	rng := f.rng("request", r.Verb, r.Resource, r.Name, r.Cached, r.Seq)
	if r.Read() {
		return f.read(r, rng)
	}
	if rng.Float64() >= f.p.requestFaults {
		return fakeapi.Fault{}
	}
	if rng.Float64() < f.p.crashes {
		return fakeapi.Fault{Crash: true}
	}
	// No delays on node requests: the status updater holds a per-node mutex while
	// it reads and patches, and a goroutine waiting on a mutex is not durably
	// blocked, so simulated time would stop.
	var delay time.Duration
	if r.Resource != fakeapi.Nodes {
		delay = time.Duration(rng.Int64N(int64(f.p.maxDelay)))
	}
	var fault fakeapi.Fault
	switch rng.IntN(8) {
	case 0:
		fault = fakeapi.Fault{Err: errInternal}
	case 1:
		fault = fakeapi.Fault{Err: errThrottle}
	case 2:
		fault = fakeapi.Fault{Err: apierrors.NewConflict(schema.GroupResource{Resource: r.Resource}, r.Name, errors.New("simulated conflict"))}
	case 3:
		fault = fakeapi.Fault{Delay: delay, Err: errTimeout}
	case 4:
		fault = fakeapi.Fault{ErrAfter: errInternal}
	case 5:
		fault = fakeapi.Fault{Latency: delay, ErrAfter: errLost}
	case 6:
		fault = fakeapi.Fault{Delay: delay}
	default:
		fault = fakeapi.Fault{Latency: delay}
	}
	// A write of unknown outcome may be the first sign of an API server in
	// trouble: reads of the resource fail for a while.
	if (fault.Err == errTimeout || fault.ErrAfter != nil) && rng.Float64() < f.p.outages {
		until := time.Now().Add(time.Duration(rng.Int64N(int64(f.p.maxOutage))))
		f.mu.Lock()
		if until.After(f.outage[r.Resource]) {
			f.outage[r.Resource] = until
		}
		f.mu.Unlock()
		f.logf("controller#%d: reads of %s fail until %s", f.incarnation, r.Resource, until.Format("15:04:05.000"))
	}
	return fault
}

// read decides the fault of a read: an error or a delay, and for an informer's
// first list, how old a state it is served.
func (f *faults) read(r fakeapi.Request, rng *rand.Rand) fakeapi.Fault {
	var fault fakeapi.Fault
	if r.Cached && r.Seq == 1 && f.p.maxListLag > 0 {
		fault.Lag = time.Duration(rng.Int64N(int64(f.p.maxListLag)))
	}
	f.mu.Lock()
	out := time.Now().Before(f.outage[r.Resource])
	f.mu.Unlock()
	if out {
		fault.Err = []error{errTimeout, errLost, errInternal}[rng.IntN(3)]
		return fault
	}
	if rng.Float64() >= f.p.readFaults {
		return fault
	}
	switch rng.IntN(4) {
	case 0:
		fault.Err = errInternal
	case 1:
		fault.Err = errTimeout
	case 2:
		fault.Err = errThrottle
	default:
		if r.Resource != fakeapi.Nodes {
			fault.Delay = time.Duration(rng.Int64N(int64(f.p.maxDelay)))
		}
	}
	return fault
}

// Delivery decides the fate of a watch event sent to the controller's informers.
// The first watch of each resource holds back the changes made before the
// incarnation started, for that resource's own time: a new leader's informers
// each lag by their own amount.
func (f *faults) Delivery(ev fakeapi.WatchEvent) fakeapi.Delivery {
	if !f.p.faultsOn.Load() {
		return fakeapi.Delivery{}
	}
	rng := f.rng("event", ev.Ref.Resource, ev.Watch, ev.ResourceVersion)
	var d fakeapi.Delivery
	if ev.Watch == 1 && f.p.maxHold > 0 {
		hold := time.Duration(f.rng("hold", ev.Ref.Resource).Int64N(int64(f.p.maxHold)))
		if until := f.started.Add(hold); ev.Time.Before(f.started) && until.After(ev.Time) {
			d.Delay = until.Sub(ev.Time)
		}
	}
	switch x := rng.Float64(); {
	case x < f.p.expireWatch:
		return fakeapi.Delivery{End: fakeapi.Expire}
	case x < f.p.expireWatch+f.p.resumeWatch:
		d.End = fakeapi.Resume
	case x < f.p.expireWatch+f.p.resumeWatch+f.p.delayEvents:
		d.Delay = max(d.Delay, time.Duration(rng.Int64N(int64(f.p.maxEventDelay))))
	}
	return d
}
