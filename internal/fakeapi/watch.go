package fakeapi

import (
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// End says how a watch ends at an event.
type End int

const (
	// Continue delivers the event and goes on.
	Continue End = iota
	// Resume delivers the event and ends the watch cleanly: the informer watches
	// again from the last resource version it saw and misses nothing.
	Resume
	// Expire does not deliver the event and ends the watch with 410 Gone, as an API
	// server does once the watch cache has moved past it: the informer lists again,
	// so it never sees the intermediate states written until then.
	Expire
)

// Delivery is what happens to one watch event.
type Delivery struct {
	// Delay holds the event back; later events of the same watch wait behind it.
	Delay time.Duration
	End   End
}

// WatchEvent describes an event about to be delivered, for a Faults to decide on.
type WatchEvent struct {
	// Watch counts the watches of this resource the client opened, from 1.
	Watch int
	Type  watch.EventType
	Ref   Ref
	// ResourceVersion is the store's revision of the change.
	ResourceVersion uint64
	// Time is when the change was made (the list's time for the ADDED events a
	// watch from resource version 0 starts with).
	Time time.Time
}

// watcher is one watch: events queue up under the store's lock and a goroutine
// delivers them in order, each when its delivery says.
type watcher struct {
	s         *Store
	resource  string
	namespace string
	deliver   func(event) Delivery
	pending   []event // guarded by s.mu
	wake      chan struct{}
	result    chan watch.Event
	done      chan struct{}
	stopped   bool // guarded by s.mu
}

// watch opens a watch on a resource from a resource version: "" or "0" starts with
// the current objects as ADDED events, any other replays the log after it.
func (s *Store) watch(resource, namespace, fromRV string, deliver func(event) Delivery) (watch.Interface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &watcher{
		s: s, resource: resource, namespace: namespace, deliver: deliver,
		wake: make(chan struct{}, 1), result: make(chan watch.Event), done: make(chan struct{}),
	}
	if fromRV == "" || fromRV == "0" {
		now := time.Now()
		for _, obj := range (reader{s}).List(resource) {
			w.enqueue(event{typ: watch.Added, ref: refOf(resource, obj), obj: obj, rv: s.rv, time: now})
		}
	} else {
		from, err := strconv.ParseUint(fromRV, 10, 64)
		if err != nil {
			return nil, apierrors.NewBadRequest("invalid resourceVersion " + fromRV)
		}
		for _, ev := range s.log {
			if ev.rv > from {
				w.enqueue(ev)
			}
		}
	}
	s.watchers[w] = struct{}{}
	go w.run()
	return w, nil
}

func (w *watcher) enqueue(ev event) {
	if ev.ref.Resource != w.resource || (w.namespace != "" && ev.ref.Namespace != w.namespace) {
		return
	}
	w.pending = append(w.pending, ev)
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// next waits for the next event; false once the watch is stopped.
func (w *watcher) next() (event, bool) {
	for {
		w.s.mu.Lock()
		if w.stopped {
			w.s.mu.Unlock()
			return event{}, false
		}
		if len(w.pending) > 0 {
			ev := w.pending[0]
			w.pending = w.pending[1:]
			w.s.mu.Unlock()
			return ev, true
		}
		w.s.mu.Unlock()
		select {
		case <-w.wake:
		case <-w.done:
		}
	}
}

func (w *watcher) run() {
	defer close(w.result)
	defer w.Stop()
	var last time.Time
	for {
		ev, ok := w.next()
		if !ok {
			return
		}
		d := w.deliver(ev)
		if d.End == Expire {
			w.send(watch.Event{Type: watch.Error, Object: expired()})
			return
		}
		at := ev.time.Add(d.Delay)
		if at.Before(last) {
			at = last
		}
		last = at
		if wait := time.Until(at); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-w.done:
				t.Stop()
				return
			}
		}
		if !w.send(watch.Event{Type: ev.typ, Object: ev.obj.DeepCopyObject()}) || d.End == Resume {
			return
		}
	}
}

func (w *watcher) send(ev watch.Event) bool {
	select {
	case w.result <- ev:
		return true
	case <-w.done:
		return false
	}
}

func expired() runtime.Object {
	status := apierrors.NewResourceExpired("too old resource version").Status()
	return &status
}

// Stop ends the watch.
func (w *watcher) Stop() {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if w.stopped {
		return
	}
	w.stopped = true
	w.pending = nil
	delete(w.s.watchers, w)
	close(w.done)
}

// ResultChan returns the events.
func (w *watcher) ResultChan() <-chan watch.Event { return w.result }
