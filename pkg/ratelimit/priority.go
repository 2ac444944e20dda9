// Package ratelimit shares one client-side rate limit (QPS and burst) between
// requests of two priorities. Writes of node status go first: kubelet waits for them
// before it mounts, so they should never queue behind a backlog of VolumeAttachment
// creates. The total rate stays what --kube-api-qps and --kube-api-burst say.
package ratelimit

import (
	"context"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/flowcontrol"
)

type class int

const (
	high class = iota
	low
)

// Priority is a token bucket whose tokens go to waiting high-priority requests
// before low-priority ones, first come first served within a priority.
type Priority struct {
	bucket *rate.Limiter
	qps    float32

	mu      sync.Mutex
	waiting [2][]chan struct{}
	wake    chan struct{}
}

// NewPriority returns a limiter of qps requests per second with the given burst.
// It hands out tokens until ctx ends.
func NewPriority(ctx context.Context, qps float32, burst int) *Priority {
	p := &Priority{
		bucket: rate.NewLimiter(rate.Limit(qps), burst),
		qps:    qps,
		wake:   make(chan struct{}, 1),
	}
	go p.dispatch(ctx)
	return p
}

// Backlog tells how long the low-priority requests now waiting will take to be
// served at the configured rate.
func (p *Priority) Backlog() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Duration(float64(len(p.waiting[low])) / float64(p.qps) * float64(time.Second))
}

// High is the view of the limiter for high-priority requests.
func (p *Priority) High() flowcontrol.RateLimiter { return view{p, high} }

// Low is the view of the limiter for everything else.
func (p *Priority) Low() flowcontrol.RateLimiter { return view{p, low} }

// dispatch takes one token from the bucket per waiting request and gives it to the
// first high-priority waiter, or else the first low-priority one.
func (p *Priority) dispatch(ctx context.Context) {
	for {
		select {
		case <-p.wake:
		case <-ctx.Done():
			return
		}
		for p.anyWaiting() {
			if err := p.bucket.Wait(ctx); err != nil {
				return
			}
			p.grantOne()
		}
	}
}

func (p *Priority) anyWaiting() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.waiting[high]) > 0 || len(p.waiting[low]) > 0
}

func (p *Priority) grantOne() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.waiting {
		if len(p.waiting[c]) > 0 {
			close(p.waiting[c][0])
			p.waiting[c] = p.waiting[c][1:]
			return
		}
	}
}

func (p *Priority) wait(ctx context.Context, c class) error {
	granted := make(chan struct{})
	p.mu.Lock()
	p.waiting[c] = append(p.waiting[c], granted)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	select {
	case <-granted:
		return nil
	case <-ctx.Done():
		p.mu.Lock()
		defer p.mu.Unlock()
		i := slices.Index(p.waiting[c], granted)
		if i < 0 {
			return nil
		}
		p.waiting[c] = slices.Delete(p.waiting[c], i, i+1)
		return ctx.Err()
	}
}

// tryAccept takes a token at once if nobody is waiting and one is there.
func (p *Priority) tryAccept() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.waiting[high]) == 0 && len(p.waiting[low]) == 0 && p.bucket.Allow()
}

// takeSpare takes a token the shared bucket can spare: nobody waits, and the
// bucket keeps at least half its burst for the requests to come.
func (p *Priority) takeSpare() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.waiting[high]) > 0 || len(p.waiting[low]) > 0 {
		return false
	}
	now := time.Now()
	if p.bucket.TokensAt(now) < float64(p.bucket.Burst())/2+1 {
		return false
	}
	return p.bucket.AllowN(now, 1)
}

// SpareOr returns a rate limiter of its own, of qps requests per second with the
// given burst, that also hands out the tokens the shared bucket can spare. A
// request takes a token of its own limit, or one of the shared bucket that no
// request waits for while the bucket keeps half its burst: it never makes a
// request of the shared bucket wait beyond that reserve, and goes at the shared
// rate when nothing else needs it. Events use it.
func (p *Priority) SpareOr(qps float32, burst int) flowcontrol.RateLimiter {
	return &spareOr{shared: p, own: rate.NewLimiter(rate.Limit(qps), burst), qps: qps}
}

type spareOr struct {
	shared *Priority
	own    *rate.Limiter
	qps    float32
}

func (s *spareOr) TryAccept() bool { return s.own.Allow() || s.shared.takeSpare() }

func (s *spareOr) Accept() { _ = s.Wait(context.Background()) }

// Wait reserves a token of its own limit and, until that token is due, looks
// for a spare one of the shared bucket as often as the shared bucket fills.
func (s *spareOr) Wait(ctx context.Context) error {
	own := s.own.Reserve()
	due := time.Now().Add(own.Delay())
	poll := time.Duration(float64(time.Second) / float64(s.shared.qps))
	for {
		left := time.Until(due)
		if left <= 0 {
			return nil
		}
		if s.shared.takeSpare() {
			own.Cancel()
			return nil
		}
		timer := time.NewTimer(min(left, poll))
		select {
		case <-ctx.Done():
			timer.Stop()
			own.Cancel()
			return ctx.Err()
		case <-timer.C:
		}
	}
}

func (s *spareOr) QPS() float32 { return s.qps }

func (s *spareOr) Stop() {}

// view is a flowcontrol.RateLimiter drawing from the shared bucket at one priority.
type view struct {
	p *Priority
	c class
}

func (v view) TryAccept() bool                { return v.p.tryAccept() }
func (v view) Accept()                        { _ = v.p.wait(context.Background(), v.c) }
func (v view) Wait(ctx context.Context) error { return v.p.wait(ctx, v.c) }
func (v view) QPS() float32                   { return v.p.qps }

// Stop is part of flowcontrol.RateLimiter; the shared bucket stops with the
// context given to NewPriority, not with one of its views.
func (v view) Stop() {}
