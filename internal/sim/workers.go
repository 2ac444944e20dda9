package sim

import (
	"context"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

func newQueue() workqueue.TypedRateLimitingInterface[string] {
	return workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
}

// runWorkers syncs the queue's keys on n goroutines until ctx ends: a key whose
// sync fails again with backoff, one whose sync asks for it after that long.
func runWorkers(ctx context.Context, name string, n int, queue workqueue.TypedRateLimitingInterface[string], sync func(context.Context, string) (time.Duration, error)) {
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	logger := klog.FromContext(ctx).WithName(name)
	for range n {
		go func() {
			for {
				key, shutdown := queue.Get()
				if shutdown {
					return
				}
				retry, err := sync(ctx, key)
				switch {
				case err != nil:
					if ctx.Err() == nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
						logger.Error(err, "Syncing", "key", key)
					}
					queue.AddRateLimited(key)
				case retry > 0:
					queue.Forget(key)
					queue.AddAfter(key, retry)
				default:
					queue.Forget(key)
				}
				queue.Done(key)
			}
		}()
	}
}

// startInformers starts the factory's informers until ctx ends and waits for
// their caches.
func startInformers(ctx context.Context, factory informers.SharedInformerFactory, what string) error {
	factory.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		factory.Shutdown()
	}()
	if err := factory.WaitForCacheSyncWithContext(ctx).AsError(); err != nil {
		return fmt.Errorf("syncing %s caches: %w", what, err)
	}
	return nil
}

// enqueueHandler enqueues the keys keysOf returns for the old and new object of every
// event.
func enqueueHandler(queue workqueue.TypedInterface[string], keysOf func(obj any) []string) cache.ResourceEventHandler {
	add := func(obj any) {
		if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tombstone.Obj
		}
		for _, key := range keysOf(obj) {
			queue.Add(key)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { add(obj) },
		UpdateFunc: func(oldObj, newObj any) { add(oldObj); add(newObj) },
		DeleteFunc: add,
	}
}

// lookUp returns what keyOf says of each object the indexer holds under key in
// index.
func lookUp[T any](indexer cache.Indexer, index, key string, keyOf func(T) string) []string {
	objs, err := indexer.ByIndex(index, key)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(objs))
	for _, obj := range objs {
		out = append(out, keyOf(obj.(T)))
	}
	return out
}

// sooner returns the shorter of two waits, 0 standing for none.
func sooner(a, b time.Duration) time.Duration {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

func resourceVersion(obj metav1.Object) uint64 {
	rv, _ := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	return rv
}

// start starts a simulator on a client made from cfg, with its user agent unless
// cfg has one.
func start[S, O any](ctx context.Context, cfg *rest.Config, userAgent string, opts O, startOn func(context.Context, kubernetes.Interface, O) (S, error)) (S, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = userAgent
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		var none S
		return none, fmt.Errorf("creating the %s client: %w", userAgent, err)
	}
	return startOn(ctx, client, opts)
}
