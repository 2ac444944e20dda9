package killproxy

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// connKey is the request context key of the client connection a request came on.
type connKey struct{}

// connOf returns the client connection a request came on.
func connOf(r *http.Request) net.Conn {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	return c
}

// reset closes a connection with a TCP reset rather than an orderly close: the
// client sees "connection reset by peer", as when a load balancer or a node dies.
func reset(c net.Conn) {
	if c == nil {
		return
	}
	if tcp, ok := c.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = c.Close()
}

// connTracker knows the open client connections and the requests being served on
// them, and whether the proxy is partitioned.
type connTracker struct {
	mu          sync.Mutex
	open        map[net.Conn]struct{}
	serving     map[*http.Request]net.Conn
	partitioned bool
}

func newConnTracker() *connTracker {
	return &connTracker{open: map[net.Conn]struct{}{}, serving: map[*http.Request]net.Conn{}}
}

// connState follows connections for http.Server.ConnState.
func (t *connTracker) connState(c net.Conn, state http.ConnState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch state {
	case http.StateNew:
		// The server reports a new connection before it reads from it: one
		// accepted during a partition is refused here.
		if t.partitioned {
			reset(c)
			return
		}
		t.open[c] = struct{}{}
	case http.StateClosed, http.StateHijacked:
		delete(t.open, c)
	}
}

// connContext records the connection in the context of its requests, for
// http.Server.ConnContext.
func (t *connTracker) connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// serve records that r is being served until the returned function is called.
func (t *connTracker) serve(r *http.Request) (done func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.serving[r] = connOf(r)
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		delete(t.serving, r)
	}
}

// admit tells whether a request may be forwarded now, and when: not while the proxy
// is partitioned. Partition takes the same lock, so a request admitted before it
// began was forwarded before the partition.
func (t *connTracker) admit() (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return time.Now(), !t.partitioned
}

// cut resets the connections serving a request that matches, and returns how many.
func (t *connTracker) cut(match func(*http.Request) bool) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	conns := map[net.Conn]struct{}{}
	for r, c := range t.serving {
		if c != nil && match(r) {
			conns[c] = struct{}{}
		}
	}
	for c := range conns {
		reset(c)
	}
	return len(conns)
}

// partition resets every open connection and refuses new ones until restore; it
// returns the moment from which no request is forwarded.
func (t *connTracker) partition() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.partitioned = true
	for c := range t.open {
		reset(c)
	}
	return time.Now()
}

func (t *connTracker) restore() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.partitioned = false
}
