package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/controller"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/eventsink"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/leasewatch"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/podevents"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/ratelimit"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/version"
)

// Run runs the controller until ctx ends (SIGTERM) or, with leader election, until
// the lease is lost.
func Run(ctx context.Context, o *Options) error {
	logger := klog.FromContext(ctx)
	logger.Info("Starting", "version", version.String())

	base, err := clientConfig(o)
	if err != nil {
		return err
	}
	if o.Controller.Shadow {
		logger.Info("Shadow mode: deciding and comparing with the cluster, writing nothing", "grace", o.Controller.ShadowGrace)
		base.Wrap(func(rt http.RoundTripper) http.RoundTripper { return readOnly{rt} })
	}

	// client-go's request, work queue and leader election metrics go to the
	// registry only if it is hooked in before the first client and queue exist.
	m := metrics.New()
	m.HookClientGo()

	// One rate limit (--kube-api-qps/--kube-api-burst) for the controller's
	// requests, with node status writes served first; events and leader election
	// have limits of their own, so that neither a burst of events nor a backlog of
	// attaches can delay a detach or a lease renewal. Events also take the tokens
	// of the shared limit that no request waits for, beyond half its burst: after
	// a burst of attaches their SuccessfulAttachVolume events go at the shared rate.
	limiter := ratelimit.NewPriority(ctx, float32(o.KubeAPIQPS), o.KubeAPIBurst)
	low := limiter.Low()
	client, err := newClient(base, "api", low)
	if err != nil {
		return err
	}
	metadataClient, err := metadata.NewForConfig(clientConfigFor(base, "api", low))
	if err != nil {
		return fmt.Errorf("creating the metadata client: %w", err)
	}
	statusClient, err := newClient(base, "node-status", limiter.High())
	if err != nil {
		return err
	}
	eventClient, err := newClient(base, "events", limiter.SpareOr(float32(o.EventQPS), o.EventBurst))
	if err != nil {
		return err
	}
	electionClient, err := newClient(base, "leader-election", flowcontrol.NewTokenBucketRateLimiter(float32(o.KubeAPIQPS), o.KubeAPIBurst))
	if err != nil {
		return err
	}

	gc := newGCTargets()
	var ready readiness
	ready.synced.Store(!o.LeaderElect)
	// running is the controller once its state is rebuilt, for explanations.
	var running atomic.Pointer[controller.Controller]
	var electionCheck *leaderelection.HealthzAdaptor
	if o.LeaderElect {
		electionCheck = leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
	}
	if o.HTTPEndpoint != "" {
		endpoints := httpEndpoints{
			metrics:   m,
			election:  electionCheck,
			ready:     ready.state,
			explainer: explainHandler(running.Load),
			pprof:     o.EnablePprof,
		}
		stop, err := serveEndpoints(ctx, o, endpoints.handler())
		if err != nil {
			return err
		}
		defer stop()
	}

	// The events are written only while this replica leads (runController); the
	// recorder exists before, for the controller a standby prepares.
	var recorder record.EventRecorder = discardEvents{}
	var events *eventsink.Recorder
	if !o.Controller.Shadow {
		events = eventsink.New(logger, eventClient.CoreV1(), scheme.Scheme, eventsink.Options{
			Source:  v1.EventSource{Component: podevents.Component},
			Dropped: m.ObserveDroppedEvent,
		})
		recorder = events
	}

	// With leader election the informers run for the whole process, from before
	// the election, and a standby fills the controller's state from them once
	// they synced (Prepare) and keeps it following them: a take-over then costs
	// the lease's expiry, the proof that the informers hold the present, and what
	// changed since, not a list of every object nor a rebuild (see
	// docs/deploy.md). Without it the process leads from the start, and the
	// controller starts them: their first lists, sent once it leads, then prove
	// that they hold the present, with no second list.
	factory := controller.NewInformerFactory(client)
	informersCtx, stopInformers := context.WithCancel(ctx)
	defer factory.Shutdown()
	defer stopInformers()
	newController := sync.OnceValues(func() (*controller.Controller, error) {
		c, err := controller.New(controller.Clients{API: client, NodeStatus: statusClient, Metadata: metadataClient, Backlog: limiter.Backlog}, factory, recorder, m, o.Controller)
		if err != nil || !o.LeaderElect {
			return c, err
		}
		started := time.Now()
		if err := c.Prepare(informersCtx); err != nil {
			return nil, fmt.Errorf("filling the state in standby: %w", err)
		}
		logger.Info(controller.PreparedLine, "duration", time.Since(started))
		return c, nil
	})
	if o.LeaderElect {
		if err := controller.StartInformers(informersCtx, factory); err != nil {
			return err
		}
		listed := gc.catchUp()
		go func() {
			defer listed()
			if controller.WaitForInformers(informersCtx, factory) != nil {
				return
			}
			if _, err := newController(); err != nil {
				logger.Error(err, "Standby not ready to take over")
				return
			}
			ready.synced.Store(true)
		}()
	}

	runController := func(ctx context.Context) error {
		rebuilt := gc.catchUp()
		defer rebuilt()
		ready.leading.Store(true)
		m.IsLeader.Set(1)
		defer m.IsLeader.Set(0)
		if events != nil {
			// The writer stops, after the controller, before this replica can
			// give up the lease: an event is a write too.
			eventsCtx, stopEvents := context.WithCancel(ctx)
			var writer sync.WaitGroup
			writer.Go(func() { events.Run(eventsCtx) })
			defer writer.Wait()
			defer stopEvents()
		}
		c, err := newController()
		if err != nil {
			return err
		}
		defer running.Store(nil)
		return c.Run(ctx, func() {
			rebuilt()
			ready.rebuilt.Store(true)
			running.Store(c)
		})
	}

	if !o.LeaderElect {
		return runController(ctx)
	}
	return runWithLeaderElection(ctx, o, electionClient, electionCheck, runController)
}

func runWithLeaderElection(ctx context.Context, o *Options, client kubernetes.Interface, check *leaderelection.HealthzAdaptor, run func(context.Context) error) error {
	logger := klog.FromContext(ctx)
	host, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("reading the hostname for the leader identity: %w", err)
	}
	identity := host + "_" + string(uuid.NewUUID())
	// The tracker watches the Lease, so that this replica takes it as soon as it
	// is released or has run out, not at the elector's next attempt.
	// reportLeader logs each other replica that leads once, whether the
	// standby's watch or its elector saw it first.
	var reportedMu sync.Mutex
	var reported string
	reportLeader := func(id string) {
		// An empty identity is a lease released or run out, not a leader.
		if id == identity || id == "" {
			return
		}
		reportedMu.Lock()
		defer reportedMu.Unlock()
		if id != reported {
			reported = id
			logger.Info("Another replica leads", "leader", id)
		}
	}
	tracker := leasewatch.New(identity, reportLeader)
	lock := &renewalTrackingLock{Interface: tracker.Lock(&resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.LeaderElectionNamespace, Name: o.LeaderElectionName},
		Client:     tracker.Leases(client.CoordinationV1()),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	})}
	// The elector gets a context of its own, cancelled only once the controller
	// has stopped: on SIGTERM the lease is released after this replica's last
	// write, never while one of its operations may still reach the API server.
	electorCtx, stopElector := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElector()
	var leading atomic.Bool
	ran := make(chan error, 1)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   o.LeaseDuration,
		RenewDeadline:   o.RenewDeadline,
		RetryPeriod:     o.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            o.LeaderElectionName,
		WatchDog:        check,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leaderCtx context.Context) {
				leading.Store(true)
				logger.Info("Became the leader", "identity", identity)
				runCtx, cancel := context.WithCancel(leaderCtx)
				defer cancel()
				defer context.AfterFunc(ctx, cancel)()
				go stopWhenRenewalLapses(runCtx, lock, o.RenewDeadline, o.RetryPeriod, cancel)
				ran <- run(runCtx)
				stopElector()
			},
			// Required by client-go; what happens next is decided when Run returns.
			OnStoppedLeading: func() {},
			OnNewLeader:      reportLeader,
		},
	})
	if err != nil {
		return fmt.Errorf("setting up leader election: %w", err)
	}
	// A standby stops at once on SIGTERM; a leader stops its controller first.
	defer context.AfterFunc(ctx, func() {
		if !leading.Load() {
			stopElector()
		}
	})()
	logger.Info("Waiting to become the leader", "lease", o.LeaderElectionNamespace+"/"+o.LeaderElectionName, "identity", identity)
	if err := tracker.Watch(electorCtx, client, o.LeaderElectionNamespace, o.LeaderElectionName); err != nil {
		return err
	}
	tracker.Await(electorCtx, o.LeaseDuration)
	elector.Run(electorCtx)
	var runErr error
	select {
	case runErr = <-ran:
	default:
	}
	if ctx.Err() == nil {
		return errors.Join(errors.New("stopped leading before shutdown: the lease was lost or the controller stopped"), runErr)
	}
	return runErr
}

// renewalTrackingLock remembers when the last write of the Lease that succeeded
// was sent: the lease runs from then at the latest.
type renewalTrackingLock struct {
	resourcelock.Interface
	mu          sync.Mutex
	lastRenewal time.Time
}

func (l *renewalTrackingLock) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	return l.track(func() error { return l.Interface.Create(ctx, rec) })
}

func (l *renewalTrackingLock) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	return l.track(func() error { return l.Interface.Update(ctx, rec) })
}

func (l *renewalTrackingLock) track(write func() error) error {
	sent := time.Now()
	err := write()
	if err == nil {
		l.mu.Lock()
		l.lastRenewal = sent
		l.mu.Unlock()
	}
	return err
}

func (l *renewalTrackingLock) sinceRenewal() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Since(l.lastRenewal)
}

// stopWhenRenewalLapses calls stop once the lease has gone renewDeadline without
// a renewal. client-go's elector ends the leader's context only after it has also
// tried to release the lease, up to another renew deadline later, by which time
// another replica may lead: the controller must have stopped writing before the
// lease can expire.
func stopWhenRenewalLapses(ctx context.Context, lock *renewalTrackingLock, renewDeadline, retryPeriod time.Duration, stop func()) {
	ticker := time.NewTicker(retryPeriod / 4)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			if since := lock.sinceRenewal(); since > renewDeadline {
				klog.FromContext(ctx).Info("Lease not renewed within the renew deadline; stopping before another replica can lead", "sinceRenewal", since)
				stop()
				return
			}
		}
	}
}

func newClient(base *rest.Config, purpose string, limiter flowcontrol.RateLimiter) (*kubernetes.Clientset, error) {
	client, err := kubernetes.NewForConfig(clientConfigFor(base, purpose, limiter))
	if err != nil {
		return nil, fmt.Errorf("creating the %s client: %w", purpose, err)
	}
	return client, nil
}

// clientConfigFor is base for one purpose, with its rate limiter and a user agent
// that names the purpose.
func clientConfigFor(base *rest.Config, purpose string, limiter flowcontrol.RateLimiter) *rest.Config {
	cfg := rest.CopyConfig(base)
	cfg.RateLimiter = limiter
	cfg.UserAgent = base.UserAgent + " (" + purpose + ")"
	return cfg
}

// clientConfig is the configuration every client of the controller is made
// from (see newClient): API, node status, events and leader election.
func clientConfig(o *Options) (*rest.Config, error) {
	base, err := restConfig(o.Kubeconfig)
	if err != nil {
		return nil, err
	}
	base.UserAgent = "attachdetach-controller/" + version.Version
	base.ContentType = o.ContentType
	base.AcceptContentTypes = acceptContentTypes(o.ContentType)
	return base, nil
}

// acceptContentTypes is what the controller accepts in answers: what it sends and,
// with protobuf, JSON too, which the API server answers with for the few objects
// that have no protobuf encoding.
func acceptContentTypes(contentType string) string {
	if contentType == protobufContentType {
		return protobufContentType + "," + jsonContentType
	}
	return contentType
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig given and not running in a cluster: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}

// readiness is what /readyz answers. A leader is ready once it has rebuilt its
// state. A standby is ready once its informers have synced: a rolling update,
// which stops an old replica only when the new one is ready, then hands the Lease
// to a replica whose caches are full, which takes over from memory instead of
// listing every object first.
type readiness struct {
	leading, rebuilt, synced atomic.Bool
}

// state tells whether the replica is ready and, if not, why.
func (r *readiness) state() (bool, string) {
	switch {
	case r.leading.Load() && !r.rebuilt.Load():
		return false, "leading, state not rebuilt yet"
	case !r.leading.Load() && !r.synced.Load():
		return false, "standing by, informers not synced yet"
	}
	return true, ""
}

// httpEndpoints are what --http-endpoint serves.
type httpEndpoints struct {
	metrics *metrics.Metrics
	// election, with leader election, fails /healthz when the lease renewal is
	// stuck.
	election *leaderelection.HealthzAdaptor
	// ready tells whether /readyz answers OK and, if not, why (readiness).
	ready func() (bool, string)
	// explainer answers explanations from the leader's live state.
	explainer http.Handler
	// pprof adds Go's profiles (--enable-pprof).
	pprof bool
}

func (e httpEndpoints) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if e.election != nil {
			if err := e.election.Check(r); err != nil {
				http.Error(w, "leader election: "+err.Error(), http.StatusInternalServerError)
				return
			}
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := e.ready(); !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(e.metrics.Registry, promhttp.HandlerOpts{}))
	mux.Handle(ExplainPath, e.explainer)
	if e.pprof {
		servePprof(mux)
	}
	return mux
}

// serveEndpoints serves handler on --http-endpoint: over HTTPS, every request
// but the probes authenticated and authorized by the API server, or, with
// --http-endpoint-insecure, over plain HTTP to anyone. stop stops the server and
// waits for it.
func serveEndpoints(ctx context.Context, o *Options, handler http.Handler) (stop func(), err error) {
	ln, err := net.Listen("tcp", o.HTTPEndpoint)
	if err != nil {
		return nil, fmt.Errorf("listening on --http-endpoint %s: %w", o.HTTPEndpoint, err)
	}
	if o.HTTPEndpointInsecure {
		return serveInsecure(ctx, ln, handler), nil
	}
	serveCtx, cancel := context.WithCancel(ctx)
	auth, err := newDelegatedAuth(serveCtx, o.Kubeconfig)
	if err != nil {
		cancel()
		_ = ln.Close()
		return nil, err
	}
	done, err := serveSecure(serveCtx, ln, o.TLSCertFile, o.TLSPrivateKeyFile, auth.wrap(handler))
	if err != nil {
		cancel()
		_ = ln.Close()
		return nil, err
	}
	return func() {
		cancel()
		<-done
	}, nil
}

// serveInsecure serves handler over plain HTTP on ln, with no authentication.
func serveInsecure(ctx context.Context, ln net.Listener, handler http.Handler) (stop func()) {
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "HTTP server stopped")
		}
	}()
	klog.FromContext(ctx).Info("Serving probes and metrics", "address", ln.Addr().String(), "scheme", "http",
		"warning", "--http-endpoint-insecure: anyone who reaches the address reads metrics and explanations, without authentication")
	return func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}
}
