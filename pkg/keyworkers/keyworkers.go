// Package keyworkers runs the workers of a rate-limited work queue keyed by name,
// as client-go's sample-controller does: a key is handled by one worker at a time,
// and a key whose handling failed comes back after the queue's rate limit.
package keyworkers

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/interleave"
)

// Run handles the queue's keys with the given number of workers until ctx ends,
// then shuts the queue down. what names a key in the log line of a failure.
func Run[T comparable](ctx context.Context, queue workqueue.TypedRateLimitingInterface[T], workers int, what string, handle func(context.Context, T) error) {
	defer queue.ShutDown()
	for range workers {
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			for processNext(ctx, queue, what, handle) {
			}
		}, time.Second)
	}
	<-ctx.Done()
}

func processNext[T comparable](ctx context.Context, queue workqueue.TypedRateLimitingInterface[T], what string, handle func(context.Context, T) error) bool {
	key, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(key)
	interleave.At(ctx, what, key)
	if err := handle(ctx, key); err != nil {
		klog.FromContext(ctx).Error(err, "Handling a queued key failed, will retry", what, key)
		queue.AddRateLimited(key)
		return true
	}
	queue.Forget(key)
	return true
}
