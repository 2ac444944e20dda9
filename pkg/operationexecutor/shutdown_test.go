package operationexecutor

import (
	"context"
	"testing"
	"time"
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
		if err := h.exec.Detach(ctx, on, NotForced); err == nil {
			t.Error("Detach after shutdown started an operation")
			h.waitDone(t)
		}
		if got := h.log.get(); len(got) != 0 {
			t.Errorf("requests after shutdown = %q, want none", got)
		}
	})
}
