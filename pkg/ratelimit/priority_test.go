package ratelimit

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestHighGoesFirst queues low-priority requests, then a high-priority one: the
// high one is served next, and the total rate is the configured one.
func TestHighGoesFirst(t *testing.T) {
	ctx := t.Context()
	p := NewPriority(ctx, 20, 1)
	if !p.Low().TryAccept() {
		t.Fatal("the burst token was not available")
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	record := func(name string, wait func(context.Context) error) {
		defer wg.Done()
		if err := wait(ctx); err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		order = append(order, name)
		mu.Unlock()
	}
	for _, name := range []string{"low-1", "low-2", "low-3"} {
		wg.Add(1)
		go record(name, p.Low().Wait)
	}
	time.Sleep(20 * time.Millisecond)
	wg.Add(1)
	go record("high", p.High().Wait)
	start := time.Now()
	wg.Wait()
	if elapsed := time.Since(start); elapsed < 120*time.Millisecond {
		t.Errorf("4 requests at 20 QPS took %s, want about 200ms", elapsed)
	}
	// The first low one may already hold the token that was being taken when the
	// high one arrived; the high one must come before the others.
	if len(order) != 4 || (order[0] != "high" && order[1] != "high") {
		t.Errorf("order = %q, want high served first or second", order)
	}
}

// TestCancelledWaiterLeavesTheQueue: a waiter whose context ends gets an error
// and takes no token from the others.
func TestCancelledWaiterLeavesTheQueue(t *testing.T) {
	p := NewPriority(t.Context(), 10, 1)
	p.Low().Accept()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if err := p.Low().Wait(ctx); err == nil {
		t.Fatal("Wait with an ended context returned no error")
	}
	start := time.Now()
	if err := p.High().Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed > 150*time.Millisecond {
		t.Errorf("next waiter served after %s, want within one token (100ms)", elapsed)
	}
}

// TestBacklog: the time the waiting low-priority requests take at the set rate.
func TestBacklog(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	p := NewPriority(ctx, 10, 1)
	p.Low().Accept()
	if got := p.Backlog(); got != 0 {
		t.Fatalf("Backlog with nobody waiting = %s, want 0", got)
	}
	for range 3 {
		go func() { _ = p.Low().Wait(ctx) }()
	}
	deadline := time.Now().Add(time.Second)
	for p.Backlog() < 200*time.Millisecond && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := p.Backlog(); got < 200*time.Millisecond || got > 300*time.Millisecond {
		t.Errorf("Backlog with 3 waiting at 10 QPS = %s, want 200-300ms", got)
	}
}

// TestSpareOr: a limiter of its own that also takes the tokens the shared bucket
// can spare: nobody waits for them and half the burst stays for those who will.
func TestSpareOr(t *testing.T) {
	tests := []struct {
		name string
		// busy keeps a low-priority request waiting on the shared bucket.
		busy bool
		want int
	}{
		// 1 token of its own, and 50 of the shared bucket's 100, in 10 ms.
		{name: "shared bucket idle", want: 51},
		// Its own token only: the waiting request has every shared one.
		{name: "a request waits on the shared bucket", busy: true, want: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				p := NewPriority(ctx, 1, 100)
				if tc.busy {
					for p.Low().TryAccept() {
					}
					go func() { _ = p.Low().Wait(ctx) }()
					synctest.Wait()
				}
				events := p.SpareOr(0.001, 1)
				got := 0
				deadline, stop := context.WithTimeout(ctx, 10*time.Millisecond)
				defer stop()
				for events.Wait(deadline) == nil {
					got++
				}
				if got != tc.want {
					t.Errorf("%d requests passed in 10ms, want %d", got, tc.want)
				}
				if !tc.busy {
					if tokens := p.bucket.Tokens(); tokens < 50 {
						t.Errorf("shared bucket left with %.0f tokens, want at least half its burst", tokens)
					}
				}
			})
		})
	}
}
