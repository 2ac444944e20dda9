package killproxy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
)

// Options configures a Proxy.
type Options struct {
	// Upstream is the API server and the credentials the proxy uses for every request,
	// e.g. a ServiceAccount's (testenv.Env.ServiceAccountConfig).
	Upstream *rest.Config
	// Counts selects the mutating requests (POST, PUT, PATCH, DELETE) that count as
	// writes; nil counts them all. See ExcludeResources.
	Counts func(*http.Request) bool
}

// Outcome is what became of a write.
type Outcome string

const (
	// Forwarded writes reached the API server.
	Forwarded Outcome = "forwarded"
	// Killed is the write held while the kill function ran, then failed.
	Killed Outcome = "killed"
	// Rejected writes arrived after the kill and were failed too.
	Rejected Outcome = "rejected"
	// Failed writes were answered with an injected error status and not forwarded.
	Failed Outcome = "failed"
	// Dropped writes reached the API server, but their response was replaced by a
	// connection reset.
	Dropped Outcome = "dropped"
	// ConnReset writes were lost to an injected connection reset, not forwarded.
	ConnReset Outcome = "reset"
	// Refused writes arrived while the proxy was partitioned, or were on their way
	// when the partition began, and were not forwarded.
	Refused Outcome = "refused"
)

// Write is one counted write.
type Write struct {
	// Seq numbers writes from 1 since Start or Reset.
	Seq    int
	Method string
	// URI is the request's path and query.
	URI  string
	Info RequestInfo
	// Fault is the fault injected, if any.
	Fault Fault
	// Status is the API server's response status for a forwarded or dropped write,
	// the injected one for a failed write.
	Status  int
	Outcome Outcome
	// Forwarded is when the write was sent on to the API server; zero if it never was.
	Forwarded time.Time
}

func (w Write) String() string {
	s := fmt.Sprintf("#%d %s %s -> %s %d", w.Seq, w.Method, w.URI, w.Outcome, w.Status)
	if w.Fault != (Fault{}) {
		s += " (fault: " + w.Fault.String() + ")"
	}
	return s
}

// Reached tells whether the write reached the API server.
func (w Write) Reached() bool {
	return !w.Forwarded.IsZero()
}

// Proxy is a running kill and fault proxy.
type Proxy struct {
	// URL is the proxy's address, http on a loopback port.
	URL string

	server  *http.Server
	forward http.Handler
	counts  func(*http.Request) bool
	tracker *connTracker

	mu sync.Mutex
	// rule chooses the faults; nil injects none.
	rule   Rule
	writes []Write
	// generation changes with Reset, so writes in flight across it are not misfiled.
	generation int
	armed      bool
	// killAfter is the number of writes let through before the kill.
	killAfter int
	kill      func()
	killOnce  *sync.Once
	killed    chan struct{}
	// inFlight counts the writes let through the kill point that have not completed
	// yet; done is signalled as each completes.
	inFlight int
	done     *sync.Cond
}

// Start listens on a free loopback port and serves until ctx ends or Close.
func Start(ctx context.Context, opts Options) (*Proxy, error) {
	if opts.Upstream == nil {
		return nil, errors.New("killproxy: Options.Upstream is required")
	}
	target, err := url.Parse(opts.Upstream.Host)
	if err != nil {
		return nil, fmt.Errorf("parsing upstream host %q: %w", opts.Upstream.Host, err)
	}
	transport, err := rest.TransportFor(opts.Upstream)
	if err != nil {
		return nil, fmt.Errorf("creating upstream transport: %w", err)
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening on loopback: %w", err)
	}
	p := &Proxy{
		URL:     "http://" + listener.Addr().String(),
		counts:  opts.Counts,
		tracker: newConnTracker(),
		forward: &httputil.ReverseProxy{
			Rewrite: func(r *httputil.ProxyRequest) {
				r.SetURL(target)
				// The upstream credentials replace whatever the client sent.
				r.Out.Header.Del("Authorization")
			},
			Transport: transport,
			// Flush every write at once: watches must stream.
			FlushInterval: -1,
		},
	}
	p.done = sync.NewCond(&p.mu)
	p.server = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 10 * time.Second,
		ConnState:         p.tracker.connState,
		ConnContext:       p.tracker.connContext,
	}
	go func() {
		if err := p.server.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Kill proxy stopped serving")
		}
	}()
	go func() {
		<-ctx.Done()
		p.Close()
	}()
	return p, nil
}

// Close stops the proxy and cuts the connections through it.
func (p *Proxy) Close() {
	_ = p.server.Close()
}

// Config returns a client configuration that talks to the API server through the proxy.
func (p *Proxy) Config() *rest.Config {
	return &rest.Config{Host: p.URL}
}

// WriteKubeconfig writes a kubeconfig file pointing at the proxy, without credentials.
func (p *Proxy) WriteKubeconfig(path string) error {
	const name = "killproxy"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: p.URL}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	cfg.CurrentContext = name
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}

// KillAfter arms the proxy: writes up to number n (counted since Start or Reset) go
// through; write n+1 is held until the writes before it have completed, kill runs,
// and then it fails, as does every later write until Disarm or Reset. The returned
// channel is closed once kill has returned.
func (p *Proxy) KillAfter(n int, kill func()) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = true
	p.killAfter = n
	p.kill = kill
	p.killOnce = &sync.Once{}
	p.killed = make(chan struct{})
	return p.killed
}

// Disarm lets every write through again; the count goes on.
func (p *Proxy) Disarm() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = false
}

// Reset disarms the proxy, forgets the writes and restarts numbering from 1.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = false
	p.writes = nil
	p.generation++
}

// Writes returns the writes seen since Start or Reset, in arrival order.
func (p *Proxy) Writes() []Write {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Write(nil), p.writes...)
}

// Count returns how many writes were seen since Start or Reset.
func (p *Proxy) Count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.writes)
}

// SetFaults makes the proxy inject the faults the rule chooses into the requests it
// receives from now on, reads and watches included; nil injects none.
func (p *Proxy) SetFaults(rule Rule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rule = rule
}

// CutConnections resets the client connections that are serving a request that
// matches (IsWatch: every open watch), and returns how many it reset.
func (p *Proxy) CutConnections(match func(*http.Request) bool) int {
	return p.tracker.cut(match)
}

// Partition resets every client connection and refuses new ones, until Restore. It
// returns the moment from which no request is forwarded: every write forwarded
// earlier has Forwarded before it.
func (p *Proxy) Partition() time.Time {
	return p.tracker.partition()
}

// Restore accepts connections again after Partition.
func (p *Proxy) Restore() {
	p.tracker.restore()
}

// ServeHTTP injects the request's fault, numbers the writes, holds those past the
// kill point and forwards the rest upstream.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer p.tracker.serve(r)()
	p.mu.Lock()
	rule := p.rule
	p.mu.Unlock()
	var fault Fault
	if rule != nil {
		fault = rule(r)
	}
	if fault.Delay > 0 {
		select {
		case <-time.After(fault.Delay):
		case <-r.Context().Done():
			return
		}
	}
	if !IsWrite(r) || (p.counts != nil && !p.counts(r)) {
		p.apply(w, r, fault)
		return
	}
	p.mu.Lock()
	seq, gen := len(p.writes)+1, p.generation
	p.writes = append(p.writes, Write{Seq: seq, Method: r.Method, URI: r.URL.RequestURI(), Info: ParseRequest(r.URL.Path), Fault: fault})
	if p.armed && seq > p.killAfter {
		once, kill, killed := p.killOnce, p.kill, p.killed
		p.mu.Unlock()
		outcome := Rejected
		once.Do(func() {
			outcome = Killed
			p.waitForWrites()
			kill()
			close(killed)
		})
		p.finish(gen, seq, result{outcome: outcome, status: http.StatusServiceUnavailable})
		http.Error(w, "killproxy: write held across the kill", http.StatusServiceUnavailable)
		return
	}
	p.inFlight++
	p.mu.Unlock()
	// The response is held until the write's record is complete: a client that
	// has its answer finds the write's outcome in Writes.
	held := httptest.NewRecorder()
	res := p.apply(held, r, fault)
	p.finish(gen, seq, res)
	if res.outcome == Forwarded || res.outcome == Failed {
		sendHeld(w, held)
	}
}

// sendHeld writes a held response to the client.
func sendHeld(w http.ResponseWriter, held *httptest.ResponseRecorder) {
	maps.Copy(w.Header(), held.Header())
	w.WriteHeader(held.Code)
	_, _ = w.Write(held.Body.Bytes())
}

// result is what became of a request.
type result struct {
	outcome   Outcome
	status    int
	forwarded time.Time
}

// apply does to a request what its fault says, forwarding it unless the fault or a
// partition forbids.
func (p *Proxy) apply(w http.ResponseWriter, r *http.Request, fault Fault) result {
	at, admitted := p.tracker.admit()
	switch {
	case !admitted:
		reset(connOf(r))
		return result{outcome: Refused}
	case fault.Status != 0:
		fault.writeStatus(w)
		return result{outcome: Failed, status: fault.Status}
	case fault.Reset:
		reset(connOf(r))
		return result{outcome: ConnReset}
	case fault.Drop:
		discard := &discardResponse{header: http.Header{}}
		p.forward.ServeHTTP(discard, r)
		reset(connOf(r))
		return result{outcome: Dropped, status: discard.status, forwarded: at}
	}
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	p.forward.ServeHTTP(rec, r)
	return result{outcome: Forwarded, status: rec.status, forwarded: at}
}

// waitForWrites waits until every forwarded write has completed.
func (p *Proxy) waitForWrites() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.inFlight > 0 {
		p.done.Wait()
	}
}

// finish records how a write ended.
func (p *Proxy) finish(gen, seq int, res result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if res.outcome != Killed && res.outcome != Rejected {
		p.inFlight--
		p.done.Broadcast()
	}
	if i := seq - 1; gen == p.generation && i < len(p.writes) {
		p.writes[i].Outcome = res.outcome
		p.writes[i].Status = res.status
		p.writes[i].Forwarded = res.forwarded
	}
}

// statusRecorder remembers the response status; Unwrap keeps flushing reachable.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter {
	return r.ResponseWriter
}
