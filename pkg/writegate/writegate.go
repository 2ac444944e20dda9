// Package writegate is the gate every API write of the controller passes
// through, one request at a time: once the controller stops (its context ends,
// on SIGTERM or when the lease is lost) no write starts any more, while a write
// already sent gets Grace to get its answer, so that the controller learns what
// it changed. The check is made for each request, not once for an operation
// that sends several: an operation that was running when the lease was lost
// sends nothing after its request on the way.
package writegate

import (
	"context"
	"errors"
	"time"
)

// Grace is how long a write sent before the controller stops may run on: long
// enough for a request on its way to get its answer, and shorter than the gap
// between a lost lease's renew deadline and its expiry.
const Grace = 4 * time.Second

// ErrStopped means a write was not sent: the controller has stopped.
var ErrStopped = errors.New("the controller has stopped: no write is sent any more")

// Open lets one request go out on behalf of ctx, the controller's context: it
// refuses with ErrStopped once ctx has ended, and otherwise returns the context
// to send the request with, which ends Grace after ctx does. The caller sends at
// most one request with it, and calls cancel once it has the answer.
func Open(ctx context.Context) (wctx context.Context, cancel context.CancelFunc, err error) {
	if ctx.Err() != nil {
		return nil, nil, ErrStopped
	}
	wctx, cancelWrite := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		timer := time.AfterFunc(Grace, cancelWrite)
		context.AfterFunc(wctx, func() { timer.Stop() })
	})
	return wctx, func() {
		stop()
		cancelWrite()
	}, nil
}
