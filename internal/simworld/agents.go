package simworld

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/internal/fakeapi"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
)

// agentDraws are the random choices of the kubelets and the external-attacher,
// which run on goroutines of their own: drawn from a generator of their own, so
// that the world's draws do not depend on when those goroutines run.
type agentDraws struct {
	mu  sync.Mutex
	rng *rand.Rand
	// failAttach and failDetach are the odds that an attempt fails.
	failAttach, failDetach float64
	// maxDelay bounds how long an attempt takes.
	maxDelay time.Duration
}

// syncPeriod is how long a kubelet waits between two syncs of its node.
func (d *agentDraws) syncPeriod() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return between(d.rng, 500*time.Millisecond, 1500*time.Millisecond)
}

// attempt draws one attach or detach attempt: mostly quick, sometimes longer
// than the controller's operation timeout, failing at the configured odds.
func (d *agentDraws) attempt(detach bool) (time.Duration, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	took := between(d.rng, 100*time.Millisecond, 3*time.Second)
	if d.rng.IntN(10) == 0 {
		took = between(d.rng, 0, d.maxDelay+time.Millisecond)
	}
	odds := d.failAttach
	if detach {
		odds = d.failDetach
	}
	return took, d.rng.Float64() < odds
}

func (d *agentDraws) stopFailing() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failAttach, d.failDetach = 0, 0
}

// between returns a random duration in [lo, hi).
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// startAgents starts the kubelets of every node and the external-attacher of
// Driver, each on a client of its own, until ctx ends.
func (w *World) startAgents(ctx context.Context) error {
	kubelet := w.store.NewClient(fakeapi.ClientOptions{Name: "kubelet"})
	var err error
	w.kubelet, err = sim.StartKubeletOn(ctx, kubelet.Interface(), sim.KubeletOptions{
		Nodes:        w.nodeNames(),
		ManagePods:   true,
		GracefulStop: true,
		Period:       w.draws.syncPeriod,
		Mounts:       w.mounts,
		Workers:      1,
	})
	if err != nil {
		return fmt.Errorf("starting the kubelets: %w", err)
	}
	attacher := w.store.NewClient(fakeapi.ClientOptions{Name: "external-attacher"})
	if _, err := sim.StartAttacherOn(ctx, attacher.Interface(), sim.AttacherOptions{
		Drivers: []string{Driver},
		Attempt: w.draws.attempt,
		Workers: 1,
	}); err != nil {
		return fmt.Errorf("starting the external-attacher: %w", err)
	}
	return nil
}
