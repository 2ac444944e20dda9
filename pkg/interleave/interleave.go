// Package interleave names the points where the controller's goroutines meet:
// informer event handlers, the periodic pass, the work-queue workers and the API
// requests of operations. A test puts a Scheduler in the controller's context to
// choose, at each point, when the goroutine that reached it goes on, and so the
// order in which goroutines run there. Without one, as in production, a meeting
// point costs one atomic load.
//
// A meeting point must not be inside a critical section: the simulation's
// scheduler pauses the goroutine in simulated time, which advances only while
// every goroutine is durably blocked, and a goroutine waiting on a mutex is not.
package interleave

import (
	"context"
	"fmt"
	"sync/atomic"

	"k8s.io/client-go/tools/cache"
)

// Scheduler decides when a goroutine that reached a meeting point goes on: At
// returns when it may. point names the place in the code, id the item handled
// there (a queue key, an object's name).
type Scheduler interface {
	At(point, id string)
}

type schedulerKey struct{}

// enabled is set once any scheduler was installed, so that without one a
// meeting point reads no context.
var enabled atomic.Bool

// WithScheduler returns a context whose meeting points s orders.
func WithScheduler(ctx context.Context, s Scheduler) context.Context {
	enabled.Store(true)
	return context.WithValue(ctx, schedulerKey{}, s)
}

// At is a meeting point: it returns when the scheduler of ctx, if any, lets the
// goroutine go on.
func At[T any](ctx context.Context, point string, id T) {
	if !enabled.Load() {
		return
	}
	if s, ok := ctx.Value(schedulerKey{}).(Scheduler); ok {
		s.At(point, fmt.Sprint(id))
	}
}

// Handler returns h with a meeting point before each event it handles, named
// "event" and identified by the object's type and key; h itself without a
// scheduler in ctx.
func Handler(ctx context.Context, h cache.ResourceEventHandler) cache.ResourceEventHandler {
	if !enabled.Load() {
		return h
	}
	s, ok := ctx.Value(schedulerKey{}).(Scheduler)
	if !ok {
		return h
	}
	meet := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			s.At("event", fmt.Sprintf("%T %s", t.Obj, t.Key))
			return
		}
		key, _ := cache.MetaNamespaceKeyFunc(obj)
		s.At("event", fmt.Sprintf("%T %s", obj, key))
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			meet(obj)
			h.OnAdd(obj, isInInitialList)
		},
		UpdateFunc: func(oldObj, newObj any) {
			meet(newObj)
			h.OnUpdate(oldObj, newObj)
		},
		DeleteFunc: func(obj any) {
			meet(obj)
			h.OnDelete(obj)
		},
	}
}
