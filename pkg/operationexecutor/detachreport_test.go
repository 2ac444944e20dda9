package operationexecutor

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// TestDetachLogsItsOutcome: the log says how a detach ended, in one of four
// messages: detached, called off, interrupted by the shutdown, or failed (an
// error).
func TestDetachLogsItsOutcome(t *testing.T) {
	outcomes := []string{"Volume detached", "Detach called off", "Detach interrupted by shutdown", "Detach failed"}
	tests := []struct {
		name string
		// setup prepares the detach; stopped ends its context once it runs.
		setup   func(h *execHarness)
		stopped bool
		want    string
	}{
		{
			name:  "detached",
			setup: func(h *execHarness) { h.informerSeesDeletes = true },
			want:  "Volume detached",
		},
		{
			name:  "called off: the node reports the volume in use",
			setup: func(h *execHarness) { h.status.node = inUseNode(true, false) },
			want:  "Detach called off",
		},
		{
			name:  "failed: node status cannot be written",
			setup: func(h *execHarness) { h.status.err = errors.New("node status patch refused") },
			want:  "Detach failed",
		},
		{
			name:    "interrupted by the shutdown",
			setup:   func(h *execHarness) { h.status.gate = make(chan struct{}) },
			stopped: true,
			want:    "Detach interrupted by shutdown",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, on := newDetachHarness(t, time.Minute)
			tc.setup(h)
			logCtx, logged := loggingContext(t)
			ctx, stop := context.WithCancel(logCtx)
			defer stop()
			if err := h.exec.Detach(ctx, on, cache.NotForced); err != nil {
				t.Fatalf("Detach: %v", err)
			}
			if tc.stopped {
				stop()
			}
			h.waitDone(t)
			var got []string
			for _, messages := range logged() {
				for _, m := range messages {
					if slices.Contains(outcomes, m) {
						got = append(got, m)
					}
				}
			}
			if want := []string{tc.want}; !slices.Equal(got, want) {
				t.Errorf("outcomes logged %q, want %q", got, want)
			}
		})
	}
}

// TestDetachErrorSaysWhyTheWaitForTheObjectEnded: a detach that sent its delete
// fails, while it waits for the VolumeAttachment to go, either on the timeout,
// which it names, or on the external-attacher's detach error, which it passes on.
func TestDetachErrorSaysWhyTheWaitForTheObjectEnded(t *testing.T) {
	tests := []struct {
		name    string
		timeout time.Duration
		// observe is what the informer delivers once the detach waits; nil:
		// nothing.
		observe *storagev1.VolumeAttachment
		want    string
	}{
		{
			name:    "timed out",
			timeout: 50 * time.Millisecond,
			want:    "timed out after 50ms waiting for VolumeAttachment " + testVAName + " to be deleted",
		},
		{
			name:    "the external-attacher failed to detach",
			timeout: time.Minute,
			observe: withStatus(attachedObject(), func(va *storagev1.VolumeAttachment) {
				va.Status.DetachError = &storagev1.VolumeError{Message: "rpc error: code = Internal desc = busy"}
			}),
			want: "the external-attacher failed to detach: rpc error: code = Internal desc = busy",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, on := newDetachHarness(t, tc.timeout)
			detached := make(chan error, 1)
			go func() { detached <- h.exec.detach(t.Context(), on, cache.NotForced) }()
			if tc.observe != nil {
				h.waitWaiting(t, testVAName)
				h.exec.ObserveVolumeAttachment(testVAName, tc.observe)
			}
			var err error
			select {
			case err = <-detached:
			case <-time.After(waitLimit):
				t.Fatal("the detach did not end")
			}
			if err == nil || err.Error() != tc.want {
				t.Errorf("detach = %v, want %q", err, tc.want)
			}
		})
	}
}
