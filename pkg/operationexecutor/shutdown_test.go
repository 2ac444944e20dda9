package operationexecutor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// TestNoOperationStartsOnceShutdownBegan: the controller stops (its context
// ends) and waits for the running operations with Executor.Wait, while the
// reconciler's workers go on draining their queue (workqueue.ShutDown lets Get
// return what is queued) and call Attach and Detach with the ended context. Each
// of those starts an operation: running.Add(1) from zero concurrently with
// running.Wait(), which sync.WaitGroup forbids (it can panic with "WaitGroup is
// reused before previous Wait has returned", and the race detector reports it),
// and the attach sends a create after the controller stopped, when the next
// leader may already be deciding on its own. Once the context has ended and
// Wait was called, Attach and Detach must refuse, and send nothing.
func TestNoOperationStartsOnceShutdownBegan(t *testing.T) {
	// shutdown ends the controller's context and waits for what runs.
	shutdown := func(t *testing.T, h *execHarness) context.Context {
		ctx, stop := context.WithCancel(t.Context())
		stop()
		waitCtx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := h.exec.Wait(waitCtx); err != nil {
			t.Fatalf("Wait with nothing running = %v", err)
		}
		return ctx
	}
	t.Run("attach", func(t *testing.T) {
		h := newExecHarness(t, time.Minute)
		ctx := shutdown(t, h)
		if err := h.exec.Attach(ctx, testPV, testNode, testPods); err == nil {
			t.Error("Attach after shutdown started an operation")
			h.waitDone(t)
		}
		if got := h.log.get(); len(got) != 0 {
			t.Errorf("requests after shutdown = %q, want none", got)
		}
	})
	t.Run("detach", func(t *testing.T) {
		h, on := newDetachHarness(t, time.Minute)
		ctx := shutdown(t, h)
		if err := h.exec.Detach(ctx, on, cache.NotForced); err == nil {
			t.Error("Detach after shutdown started an operation")
			h.waitDone(t)
		}
		if got := h.log.get(); len(got) != 0 {
			t.Errorf("requests after shutdown = %q, want none", got)
		}
	})
}

// TestEitherSignOfTheStopRefusesAnOperation: the controller's context ending
// and Executor.Wait are each enough to refuse a new operation. A caller still
// holding a live context (a worker draining its queue) gets nothing started once
// Wait was called, and a caller whose context has ended gets nothing started
// before it.
func TestEitherSignOfTheStopRefusesAnOperation(t *testing.T) {
	tests := []struct {
		name string
		// ended: the caller's context has ended; waited: Wait was called.
		ended, waited bool
	}{
		{name: "context ended, Wait not called", ended: true},
		{name: "Wait called, context alive", waited: true},
	}
	for _, tc := range tests {
		for _, op := range []string{"attach", "detach"} {
			t.Run(tc.name+", "+op, func(t *testing.T) {
				h, on := newDetachHarness(t, time.Minute)
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				if tc.ended {
					cancel()
				}
				if tc.waited {
					waitCtx, cancelWait := context.WithTimeout(context.Background(), waitLimit)
					defer cancelWait()
					if err := h.exec.Wait(waitCtx); err != nil {
						t.Fatalf("Wait with nothing running = %v", err)
					}
				}
				var err error
				if op == "attach" {
					err = h.exec.Attach(ctx, testRWX, otherNode, testPods)
				} else {
					err = h.exec.Detach(ctx, on, cache.NotForced)
				}
				if !errors.Is(err, ErrStopped) {
					t.Errorf("%s = %v, want ErrStopped", op, err)
				}
				if h.anyRunning(testPV.Name) {
					t.Errorf("the %s holds a lock: it started", op)
				}
				if got := h.log.get(); len(got) != 0 {
					t.Errorf("requests = %q, want none", got)
				}
			})
		}
	}
}

// TestWaitReturnsOnlyAfterRunningOperationsEnd: shutdown waits for the
// operations that run, and gives up when its own context ends.
func TestWaitReturnsOnlyAfterRunningOperationsEnd(t *testing.T) {
	h := newExecHarness(t, time.Minute)
	h.informerSeesCreates = true
	if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
		t.Fatal(err)
	}
	h.waitWaiting(t, testVAName)

	short, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := h.exec.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait while an attach runs = %v, want the context's deadline", err)
	}

	waited := make(chan error, 1)
	go func() { waited <- h.exec.Wait(context.Background()) }()
	select {
	case err := <-waited:
		t.Fatalf("Wait returned %v while the attach runs", err)
	case <-time.After(20 * time.Millisecond):
	}
	h.attachCreated(t)
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("Wait = %v once the attach ended", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Wait did not return once the attach ended")
	}
	h.waitDone(t)
	again, cancelAgain := context.WithTimeout(t.Context(), waitLimit)
	defer cancelAgain()
	if err := h.exec.Wait(again); err != nil {
		t.Errorf("Wait with nothing running = %v", err)
	}
}
