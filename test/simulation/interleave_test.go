package simulation

import (
	"sync"
	"time"
)

// longPoints are the meeting points where a long pause finds races the reviews
// found: before the periodic pass records what the VolumeAttachment informer
// holds (it once listed the informer, then read the recorded names, with this
// point between), and between the deletes of one detach.
var longPoints = map[string]bool{"resync-attachments": true, "detach-delete": true}

// scheduler orders one incarnation's goroutines at their meeting points (package
// interleave). A goroutine there yields or sleeps for a time drawn from the seed,
// the point, the item and how often that item reached that point: as simulated
// time advances only once every goroutine is blocked, goroutines that sleep wake
// one at a time, in an order the seed chose, and the world's steps fall between
// them. A long sleep opens a window for whatever else runs meanwhile.
type scheduler struct {
	p           *plan
	incarnation int
	// done ends every pause once the incarnation stopped, so that none outlives
	// the seed.
	done <-chan struct{}

	mu    sync.Mutex
	count map[string]int
}

func newScheduler(p *plan, incarnation int, done <-chan struct{}) *scheduler {
	return &scheduler{p: p, incarnation: incarnation, done: done, count: map[string]int{}}
}

func (s *scheduler) At(point, id string) {
	s.mu.Lock()
	key := point + "\x00" + id
	s.count[key]++
	n := s.count[key]
	s.mu.Unlock()
	rng := s.p.rng("meet", s.incarnation, point, id, n)
	// Distinct wake-up times, microseconds apart, order the sleepers.
	pause := time.Duration(1 + rng.Int64N(int64(50*time.Microsecond)))
	if rng.Float64() < s.p.stir {
		pause += time.Duration(rng.Int64N(int64(100 * time.Millisecond)))
	}
	long := s.p.long
	if longPoints[point] {
		long *= 5
	}
	if rng.Float64() < long {
		pause = time.Duration(rng.Int64N(int64(5 * time.Second)))
	}
	t := time.NewTimer(pause)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.done:
	}
}
