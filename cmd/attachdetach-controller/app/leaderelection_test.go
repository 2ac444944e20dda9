package app

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// The controller stops once its lease has gone the renew deadline without a
// renewal, not when client-go gets round to ending the leader's context (after it
// has tried to release the lease, up to another renew deadline later).
func TestStopWhenRenewalLapses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := &renewalTrackingLock{lastRenewal: time.Now()}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		stopped := make(chan time.Time, 1)
		started := time.Now()
		go stopWhenRenewalLapses(ctx, lock, 10*time.Second, 2*time.Second, func() { stopped <- time.Now() })

		time.Sleep(6 * time.Second)
		if err := lock.track(func() error { return nil }); err != nil {
			t.Fatal(err)
		}
		at := <-stopped
		if got, want := at.Sub(started), 16*time.Second; got < want || got > want+time.Second {
			t.Errorf("stopped %s after the start, want %s: 10 s after the last renewal, at 6 s", got, want)
		}
	})
}
