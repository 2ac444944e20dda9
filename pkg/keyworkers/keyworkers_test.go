package keyworkers

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
)

func TestRunRetriesFailedKeysAndForgetsHandledOnes(t *testing.T) {
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	calls := map[string]int{}
	done := make(chan struct{})
	go func() {
		Run(ctx, queue, 2, "key", func(_ context.Context, key string) (time.Duration, error) {
			mu.Lock()
			defer mu.Unlock()
			calls[key]++
			if key == "flaky" && calls[key] < 3 {
				return 0, errors.New("not yet")
			}
			if calls["flaky"] == 3 && calls["fine"] == 1 {
				select {
				case <-done:
				default:
					close(done)
				}
			}
			return 0, nil
		})
	}()
	queue.Add("fine")
	queue.Add("flaky")
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("calls = %v, want fine once and flaky three times", calls)
	}
	deadline := time.Now().Add(5 * time.Second)
	for queue.NumRequeues("flaky") != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if n := queue.NumRequeues("flaky"); n != 0 {
		t.Errorf("NumRequeues(flaky) = %d after it was handled, want 0 (forgotten)", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls["fine"] != 1 || calls["flaky"] != 3 {
		t.Errorf("calls = %v, want fine once and flaky three times", calls)
	}
}

func TestRunHandlesAKeyAgainAfterTheDelayItsHandlerAsksFor(t *testing.T) {
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Hour, time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	handled := make(chan time.Time, 2)
	calls := 0
	go Run(ctx, queue, 1, "key", func(_ context.Context, _ string) (time.Duration, error) {
		handled <- time.Now()
		if calls++; calls == 1 {
			return 50 * time.Millisecond, nil
		}
		return 0, nil
	})
	queue.Add("later")
	var first, second time.Time
	for i, at := range []*time.Time{&first, &second} {
		select {
		case *at = <-handled:
		case <-time.After(5 * time.Second):
			t.Fatalf("the key was handled %d times, want 2", i)
		}
	}
	if d := second.Sub(first); d < 50*time.Millisecond {
		t.Errorf("the key came back after %v, want at least the 50ms its handler asked for", d)
	}
	if n := queue.NumRequeues("later"); n != 0 {
		t.Errorf("NumRequeues(later) = %d, want 0: a delay asked for is not a failure", n)
	}
}

func TestRunDelayingHandlesAKeyAgainAfterTheDelayItsHandlerAsksForAndThenLetsItGo(t *testing.T) {
	queue := workqueue.NewTypedDelayingQueue[string]()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	handled := make(chan time.Time, 3)
	calls := 0
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		RunDelaying(ctx, queue, 1, "key", func(_ context.Context, _ string) time.Duration {
			handled <- time.Now()
			if calls++; calls == 1 {
				return 50 * time.Millisecond
			}
			return 0
		})
	}()
	queue.Add("later")
	var first, second time.Time
	for i, at := range []*time.Time{&first, &second} {
		select {
		case *at = <-handled:
		case <-time.After(5 * time.Second):
			t.Fatalf("the key was handled %d times, want 2", i)
		}
	}
	if d := second.Sub(first); d < 50*time.Millisecond {
		t.Errorf("the key came back after %v, want at least the 50ms its handler asked for", d)
	}
	select {
	case <-handled:
		t.Error("the key was handled a third time, though its handler asked for no delay")
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	<-stopped
	if !queue.ShuttingDown() {
		t.Error("the queue still runs after RunDelaying returned")
	}
}
