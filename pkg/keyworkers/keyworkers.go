// Package keyworkers runs the workers of a work queue keyed by name, the one
// worker loop of the controller's queues (pods, nodes, volumes): a key is handled
// by one worker at a time, and a handler may ask for its key to come back after a
// delay, as a controller-runtime reconciler does. On a rate-limited queue (Run), a
// key whose handling failed comes back after the queue's rate limit; a handler
// that cannot fail runs on a plain delaying queue (RunDelaying).
package keyworkers

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/interleave"
)

// Handler handles one key. It returns an error for the key to be retried after
// the queue's rate limit, or a positive requeueAfter for the key to be handled
// again after that delay; zero and nil mean the key is done until it is added
// again.
type Handler[T comparable] func(ctx context.Context, key T) (requeueAfter time.Duration, err error)

// DelayHandler handles one key and cannot fail. It returns a positive
// requeueAfter for the key to be handled again after that delay; zero means the
// key is done until it is added again.
type DelayHandler[T comparable] func(ctx context.Context, key T) (requeueAfter time.Duration)

// Run handles the queue's keys with the given number of workers until ctx ends,
// then shuts the queue down. what names a key in the log line of a failure.
func Run[T comparable](ctx context.Context, queue workqueue.TypedRateLimitingInterface[T], workers int, what string, handle Handler[T]) {
	work(ctx, queue, workers, what, func(ctx context.Context, key T) {
		after, err := handle(ctx, key)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Handling a queued key failed, will retry", what, key)
			queue.AddRateLimited(key)
			return
		}
		queue.Forget(key)
		if after > 0 {
			queue.AddAfter(key, after)
		}
	})
}

// RunDelaying handles the queue's keys as Run does, with a handler that cannot
// fail, so that the queue needs no rate limiter.
func RunDelaying[T comparable](ctx context.Context, queue workqueue.TypedDelayingInterface[T], workers int, what string, handle DelayHandler[T]) {
	work(ctx, queue, workers, what, func(ctx context.Context, key T) {
		if after := handle(ctx, key); after > 0 {
			queue.AddAfter(key, after)
		}
	})
}

// work runs the workers that take the queue's keys one at a time until ctx
// ends, then shuts the queue down.
func work[T comparable](ctx context.Context, queue workqueue.TypedInterface[T], workers int, what string, handle func(context.Context, T)) {
	defer queue.ShutDown()
	for range workers {
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			for processNext(ctx, queue, what, handle) {
			}
		}, time.Second)
	}
	<-ctx.Done()
}

func processNext[T comparable](ctx context.Context, queue workqueue.TypedInterface[T], what string, handle func(context.Context, T)) bool {
	key, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(key)
	interleave.At(ctx, what, key)
	handle(ctx, key)
	return true
}
