package writegate

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestAWriteSentBeforeTheStopGetsGraceAndNoMore: a request sent before the
// controller stops gets Grace to answer, and no more.
func TestAWriteSentBeforeTheStopGetsGraceAndNoMore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, stop := context.WithCancel(context.Background())
		wctx, cancel, err := Open(parent)
		if err != nil {
			t.Fatalf("Open while the controller runs = %v", err)
		}
		defer cancel()
		time.Sleep(time.Hour)
		if wctx.Err() != nil {
			t.Fatal("the write context ended while the controller runs")
		}
		stop()
		synctest.Wait()
		if wctx.Err() != nil {
			t.Fatal("the write context ended with the controller")
		}
		time.Sleep(Grace - time.Nanosecond)
		synctest.Wait()
		if wctx.Err() != nil {
			t.Fatal("the write context ended before Grace")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if !errors.Is(wctx.Err(), context.Canceled) {
			t.Errorf("write context %v Grace after the stop, want it canceled", wctx.Err())
		}
	})
	synctest.Test(t, func(t *testing.T) {
		wctx, cancel, err := Open(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		if wctx.Err() == nil {
			t.Error("the write context outlived its own cancel")
		}
	})
}

// TestNoWriteOpensOnceTheControllerStopped: the gate refuses every request asked
// for after the stop, however short ago.
func TestNoWriteOpensOnceTheControllerStopped(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	stop()
	if wctx, _, err := Open(ctx); !errors.Is(err, ErrStopped) || wctx != nil {
		t.Errorf("Open after the stop = %v, %v; want ErrStopped and no context", wctx, err)
	}
}
