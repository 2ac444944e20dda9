package simulation

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/attachdetach-controller/attachdetach-controller/internal/fakeapi"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/controller"
)

// plan is what a seed draws before it starts: the size of the world, how long it
// changes, the controller's options, when it is killed, and how often faults
// strike.
type plan struct {
	seed           uint64
	nodes, volumes int
	workload       time.Duration
	opts           controller.Options
	// kills are the times, from the start, at which the running controller is killed.
	kills []time.Duration
	// requestFaults is the odds of a fault on a controller write; crashes the
	// odds that such a fault kills the controller at the write.
	requestFaults, crashes float64
	// maxDelay bounds the delay of a request before it is applied.
	maxDelay time.Duration
	// delayEvents, resumeWatch and expireWatch are the odds, per watch event, of a
	// delay (up to maxEventDelay), a clean end of the watch, and a 410 Gone.
	delayEvents, resumeWatch, expireWatch float64
	maxEventDelay                         time.Duration
	attachFailure, detachFailure          float64
	slowAttach                            time.Duration
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
	p.faultsOn.Store(true)
	return p
}

// faults are the faults of one controller incarnation. Each decision is drawn
// from the seed, the incarnation and the identity of the request or event, so
// that it does not depend on the order in which goroutines send requests.
type faults struct {
	p           *plan
	incarnation int
}

func (f faults) rng(parts ...any) *rand.Rand {
	h := fnv.New64a()
	for _, part := range parts {
		fmt.Fprintf(h, "%v\x00", part)
	}
	return rand.New(rand.NewPCG(f.p.seed, h.Sum64()))
}

var (
	errInternal = apierrors.NewInternalError(errors.New("simulated etcd failure"))
	errThrottle = apierrors.NewTooManyRequests("simulated throttling", 1)
	errTimeout  = apierrors.NewTimeoutError("simulated request timeout", 1)
	errLost     = errors.New("http2: client connection lost (simulated)")
)

// Request decides the fault of a controller write.
func (f faults) Request(r fakeapi.Request) fakeapi.Fault {
	if !f.p.faultsOn.Load() {
		return fakeapi.Fault{}
	}
	rng := f.rng("request", f.incarnation, r.Verb, r.Resource, r.Name, r.Seq)
	if rng.Float64() >= f.p.requestFaults {
		return fakeapi.Fault{}
	}
	if rng.Float64() < f.p.crashes {
		return fakeapi.Fault{Crash: true}
	}
	// No delays on node writes: the status updater holds a per-node mutex while
	// it patches, and a goroutine waiting on a mutex is not durably blocked, so
	// simulated time would stop.
	var delay time.Duration
	if r.Resource != fakeapi.Nodes {
		delay = time.Duration(rng.Int64N(int64(f.p.maxDelay)))
	}
	switch rng.IntN(8) {
	case 0:
		return fakeapi.Fault{Err: errInternal}
	case 1:
		return fakeapi.Fault{Err: errThrottle}
	case 2:
		return fakeapi.Fault{Err: apierrors.NewConflict(schema.GroupResource{Resource: r.Resource}, r.Name, errors.New("simulated conflict"))}
	case 3:
		return fakeapi.Fault{Delay: delay, Err: errTimeout}
	case 4:
		return fakeapi.Fault{ErrAfter: errInternal}
	case 5:
		return fakeapi.Fault{Latency: delay, ErrAfter: errLost}
	case 6:
		return fakeapi.Fault{Delay: delay}
	default:
		return fakeapi.Fault{Latency: delay}
	}
}

// Delivery decides the fate of a watch event sent to the controller's informers.
func (f faults) Delivery(ev fakeapi.WatchEvent) fakeapi.Delivery {
	if !f.p.faultsOn.Load() {
		return fakeapi.Delivery{}
	}
	rng := f.rng("event", f.incarnation, ev.Ref.Resource, ev.Watch, ev.ResourceVersion)
	switch x := rng.Float64(); {
	case x < f.p.expireWatch:
		return fakeapi.Delivery{End: fakeapi.Expire}
	case x < f.p.expireWatch+f.p.resumeWatch:
		return fakeapi.Delivery{End: fakeapi.Resume}
	case x < f.p.expireWatch+f.p.resumeWatch+f.p.delayEvents:
		return fakeapi.Delivery{Delay: time.Duration(rng.Int64N(int64(f.p.maxEventDelay)))}
	}
	return fakeapi.Delivery{}
}
