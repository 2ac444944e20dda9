package operationexecutor

import (
	"context"
	"sync"

	storagev1 "k8s.io/api/storage/v1"
)

// condition looks at a VolumeAttachment (nil once it is gone) and tells whether
// the wait is over, and with what error.
type condition func(va *storagev1.VolumeAttachment) (done bool, err error)

// waiter lets operations wait for what the VolumeAttachment informer sees, so that
// no operation polls the API server or opens a watch of its own.
type waiter struct {
	mu      sync.Mutex
	waiting map[string]map[*waitEntry]struct{}
}

type waitEntry struct {
	cond   condition
	result chan error
}

func newWaiter() *waiter {
	return &waiter{waiting: make(map[string]map[*waitEntry]struct{})}
}

// observe hands the latest state of a VolumeAttachment (nil when deleted) to the
// operations waiting on it.
func (w *waiter) observe(name string, va *storagev1.VolumeAttachment) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for e := range w.waiting[name] {
		if done, err := e.cond(va); done {
			e.result <- err
			w.removeLocked(name, e)
		}
	}
}

// waitsFor tells whether an operation waits on the VolumeAttachment.
func (w *waiter) waitsFor(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.waiting[name]) > 0
}

// wait blocks until cond holds for the VolumeAttachment, starting from current
// (what the informer holds now), or until ctx ends.
func (w *waiter) wait(ctx context.Context, name string, current func() *storagev1.VolumeAttachment, cond condition) error {
	e := &waitEntry{cond: cond, result: make(chan error, 1)}
	w.mu.Lock()
	if done, err := cond(current()); done {
		w.mu.Unlock()
		return err
	}
	if w.waiting[name] == nil {
		w.waiting[name] = make(map[*waitEntry]struct{})
	}
	w.waiting[name][e] = struct{}{}
	w.mu.Unlock()

	select {
	case err := <-e.result:
		return err
	case <-ctx.Done():
		w.mu.Lock()
		defer w.mu.Unlock()
		select {
		case err := <-e.result:
			return err
		default:
		}
		w.removeLocked(name, e)
		return ctx.Err()
	}
}

func (w *waiter) removeLocked(name string, e *waitEntry) {
	delete(w.waiting[name], e)
	if len(w.waiting[name]) == 0 {
		delete(w.waiting, name)
	}
}
