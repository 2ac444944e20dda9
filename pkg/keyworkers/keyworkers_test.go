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
		Run(ctx, queue, 2, "key", func(_ context.Context, key string) error {
			mu.Lock()
			defer mu.Unlock()
			calls[key]++
			if key == "flaky" && calls[key] < 3 {
				return errors.New("not yet")
			}
			if calls["flaky"] == 3 && calls["fine"] == 1 {
				select {
				case <-done:
				default:
					close(done)
				}
			}
			return nil
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
