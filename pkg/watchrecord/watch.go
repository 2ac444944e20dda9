package watchrecord

import (
	"sync"

	"k8s.io/apimachinery/pkg/watch"
)

// recordedWatch passes a watch's events on, each first to each (unless nil), and
// tells its record when it ends: at an error event (errored), or when its channel
// closes, whichever comes first.
type recordedWatch struct {
	inner  watch.Interface
	events chan watch.Event
	stop   chan struct{}
	once   sync.Once
}

func newRecordedWatch(inner watch.Interface, each func(watch.Event), ended func(errored bool)) *recordedWatch {
	w := &recordedWatch{inner: inner, events: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(w.events)
		var endOnce sync.Once
		defer endOnce.Do(func() { ended(false) })
		for ev := range inner.ResultChan() {
			if ev.Type == watch.Error {
				endOnce.Do(func() { ended(true) })
			}
			if each != nil {
				each(ev)
			}
			select {
			case w.events <- ev:
			case <-w.stop:
				return
			}
		}
	}()
	return w
}

func (w *recordedWatch) ResultChan() <-chan watch.Event { return w.events }

func (w *recordedWatch) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.inner.Stop()
	})
}
