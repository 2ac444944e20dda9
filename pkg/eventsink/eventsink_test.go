package eventsink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2/ktesting"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/podevents"
)

var source = v1.EventSource{Component: podevents.Component}

// drops counts the events a Recorder reports dropped, by type and cause.
type drops struct {
	mu     sync.Mutex
	counts map[[2]string]int
}

func (d *drops) add(eventType, cause string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.counts == nil {
		d.counts = map[[2]string]int{}
	}
	d.counts[[2]string{eventType, cause}]++
}

func (d *drops) get(eventType, cause string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.counts[[2]string{eventType, cause}]
}

// start runs the recorder until the test ends, and checks that it stops.
func start(t *testing.T, r *Recorder) (stop func()) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return within 5 s of its context ending")
		}
	}
	t.Cleanup(stop)
	return stop
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after %s", what, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func listEvents(t *testing.T, client *fake.Clientset) []v1.Event {
	t.Helper()
	list, err := client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func pod(i int) cache.PodRef {
	return cache.PodRef{Namespace: fmt.Sprintf("ns-%d", i%7), Name: fmt.Sprintf("pod-%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}
}

// rateLimitedSink is an API server that takes events no faster than its
// limiter allows and keeps them, one per name.
type rateLimitedSink struct {
	typedcorev1.EventInterface
	limiter flowcontrol.RateLimiter

	mu      sync.Mutex
	written map[string]*v1.Event
	creates map[string]int
}

func (s *rateLimitedSink) Events(string) typedcorev1.EventInterface { return s }

func (s *rateLimitedSink) CreateWithEventNamespaceWithContext(ctx context.Context, e *v1.Event) (*v1.Event, error) {
	if err := s.limiter.Wait(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := e.Namespace + "/" + e.Name
	if _, ok := s.written[key]; ok {
		return nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "events"}, e.Name)
	}
	s.written[key] = e.DeepCopy()
	s.creates[e.Type]++
	return e, nil
}

func (s *rateLimitedSink) createdOf(eventType string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.creates[eventType]
}

// TestBurstOfFiveThousand sends, from ten goroutines at once, a "Waiting for
// detach" warning and a SuccessfulAttachVolume event to each of 5,000 pods,
// far faster than the API takes them: every warning must be written, and every
// normal event written or counted as dropped.
func TestBurstOfFiveThousand(t *testing.T) {
	const pods, senders, qps = 5000, 10, 2000
	sink := &rateLimitedSink{
		limiter: flowcontrol.NewTokenBucketRateLimiter(qps, 50),
		written: map[string]*v1.Event{},
		creates: map[string]int{},
	}
	var dropped drops
	rec := New(ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2))), sink, scheme.Scheme,
		Options{Source: source, Dropped: dropped.add, MaxQueuedNormal: 1000})
	stop := start(t, rec)
	emitter := podevents.NewEmitter(rec)

	began := time.Now()
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := s; i < pods; i += senders {
				p := pod(i)
				emitter.EmitEach([]cache.PodRef{p}, v1.EventTypeWarning, podevents.ReasonFailedAttach, func(p cache.PodRef) string {
					return podevents.WaitingForDetach("pv-"+p.Name, p.Namespace, []cache.PodRef{{Namespace: p.Namespace, Name: "holder-of-" + p.Name}})
				})
				emitter.Emit([]cache.PodRef{p}, v1.EventTypeNormal, podevents.ReasonSuccessfulAttach, podevents.AttachSucceeded("pv-"+p.Name))
			}
		})
	}
	wg.Wait()
	sent := time.Since(began)
	eventually(t, 30*time.Second, "all written or dropped", func() bool {
		return sink.createdOf(v1.EventTypeWarning) == pods &&
			sink.createdOf(v1.EventTypeNormal)+dropped.get(v1.EventTypeNormal, CauseQueueFull) == pods
	})
	took := time.Since(began)
	stop()

	droppedNormal := dropped.get(v1.EventTypeNormal, CauseQueueFull)
	t.Logf("%d pods: sent in %s; warnings written %d; normal written %d, dropped %d; all done in %s at %d writes/s",
		pods, sent.Round(time.Millisecond), sink.createdOf(v1.EventTypeWarning), sink.createdOf(v1.EventTypeNormal), droppedNormal,
		took.Round(time.Millisecond), qps)
	if droppedNormal == 0 {
		t.Errorf("no normal event dropped: the burst did not outrun the writer, the test shows nothing")
	}
	for _, eventType := range []string{v1.EventTypeNormal, v1.EventTypeWarning} {
		for _, cause := range []string{CauseSpamFilter, CauseRejected, CauseRetryLimit} {
			if n := dropped.get(eventType, cause); n != 0 {
				t.Errorf("%d %s events dropped for %s", n, eventType, cause)
			}
		}
	}
	warned := map[string]bool{}
	for _, e := range sink.written {
		if e.Type != v1.EventTypeWarning {
			continue
		}
		p := cache.PodRef{Namespace: e.InvolvedObject.Namespace, Name: e.InvolvedObject.Name}
		want := fmt.Sprintf(`Waiting for detach for volume "pv-%s" Volume is already used by pod(s) holder-of-%s`, p.Name, p.Name)
		if e.Reason != podevents.ReasonFailedAttach || e.Message != want || e.Count != 1 || e.Source.Component != podevents.Component {
			t.Errorf("warning on %s: %s %q count %d from %q, want %s %q count 1 from %q",
				p.Key(), e.Reason, e.Message, e.Count, e.Source.Component, podevents.ReasonFailedAttach, want, podevents.Component)
		}
		warned[p.Key()] = true
	}
	for i := range pods {
		if p := pod(i); !warned[p.Key()] {
			t.Errorf("no warning on %s", p.Key())
		}
	}
}

// TestWritesWhatClientGoWrites compares the Event written for one call with the
// one client-go's broadcaster writes for the same call.
func TestWritesWhatClientGoWrites(t *testing.T) {
	p := pod(1)
	emit := func(r record.EventRecorder) {
		podevents.NewEmitter(r).Emit([]cache.PodRef{p}, v1.EventTypeWarning, podevents.ReasonFailedAttach, podevents.AttachFailed("pv-1", errors.New("boom")))
	}
	ours := fake.NewClientset()
	rec := New(ktesting.NewLogger(t, ktesting.NewConfig()), ours.CoreV1(), scheme.Scheme, Options{Source: source})
	emit(rec)
	start(t, rec)

	theirs := fake.NewClientset()
	broadcaster := record.NewBroadcaster()
	defer broadcaster.Shutdown()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: theirs.CoreV1().Events("")})
	emit(broadcaster.NewRecorder(scheme.Scheme, source))

	var got, want []v1.Event
	eventually(t, 5*time.Second, "both written", func() bool {
		got, want = listEvents(t, ours), listEvents(t, theirs)
		return len(got) == 1 && len(want) == 1
	})
	if !sameEvent(got[0], want[0]) {
		t.Errorf("written event =\n%+v\nclient-go writes\n%+v", got[0], want[0])
	}
}

// sameEvent compares what kubectl shows of two events, leaving out the names
// and times that differ between any two writes.
func sameEvent(a, b v1.Event) bool {
	return a.Namespace == b.Namespace && a.InvolvedObject == b.InvolvedObject && a.Type == b.Type &&
		a.Reason == b.Reason && a.Message == b.Message && a.Count == b.Count && a.Source == b.Source &&
		a.ReportingController == b.ReportingController && a.ReportingInstance == b.ReportingInstance &&
		a.Action == b.Action && a.Series == b.Series && a.Related == b.Related
}

func TestRepeats(t *testing.T) {
	p := pod(1)
	warn := func(r record.EventRecorder) {
		podevents.NewEmitter(r).Emit([]cache.PodRef{p}, v1.EventTypeWarning, podevents.ReasonFailedAttach, podevents.AttachFailed("pv-1", errors.New("boom")))
	}
	tests := []struct {
		name string
		// run sends the repeats, starting the recorder when it means to.
		run       func(t *testing.T, r *Recorder, client *fake.Clientset)
		wantCount int32
	}{
		{
			name: "repeats while the first waits are folded into it",
			run: func(t *testing.T, r *Recorder, _ *fake.Clientset) {
				for range 3 {
					warn(r)
				}
				start(t, r)
			},
			wantCount: 1,
		},
		{
			name: "a repeat once the first is written counts on it",
			run: func(t *testing.T, r *Recorder, client *fake.Clientset) {
				start(t, r)
				warn(r)
				eventually(t, 5*time.Second, "written once", func() bool { return len(listEvents(t, client)) == 1 })
				warn(r)
			},
			wantCount: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			rec := New(ktesting.NewLogger(t, ktesting.NewConfig()), client.CoreV1(), scheme.Scheme, Options{Source: source})
			tc.run(t, rec, client)
			eventually(t, 5*time.Second, fmt.Sprintf("one event with count %d", tc.wantCount), func() bool {
				events := listEvents(t, client)
				return len(events) == 1 && events[0].Count == tc.wantCount
			})
			time.Sleep(50 * time.Millisecond)
			if events := listEvents(t, client); len(events) != 1 || events[0].Count != tc.wantCount {
				t.Errorf("events = %+v, want one with count %d", events, tc.wantCount)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	gr := schema.GroupResource{Resource: "events"}
	terminating := apierrors.NewForbidden(gr, "e", errors.New("namespace is terminating"))
	terminating.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: v1.NamespaceTerminatingCause}}
	tests := []struct {
		name        string
		err         error
		wantWritten bool
	}{
		{"no answer", errors.New("connection refused"), true},
		{"too many requests", apierrors.NewTooManyRequests("slow down", 0), true},
		{"internal error", apierrors.NewInternalError(errors.New("etcd")), true},
		{"unavailable", apierrors.NewServiceUnavailable("starting"), true},
		{"server timeout", apierrors.NewServerTimeout(gr, "create", 1), true},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "Event"}, "e", nil), false},
		{"namespace terminating", terminating, false},
	}
	for _, tc := range tests {
		for _, eventType := range []string{v1.EventTypeWarning, v1.EventTypeNormal} {
			t.Run(tc.name+"/"+eventType, func(t *testing.T) {
				client := fake.NewClientset()
				var attempts atomic.Int64
				client.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
					if attempts.Add(1) <= 2 {
						return true, nil, tc.err
					}
					return false, nil, nil
				})
				var dropped drops
				rec := New(ktesting.NewLogger(t, ktesting.NewConfig()), client.CoreV1(), scheme.Scheme,
					Options{Source: source, RetryDelay: time.Millisecond, Dropped: dropped.add})
				start(t, rec)
				podevents.NewEmitter(rec).Emit([]cache.PodRef{pod(1)}, eventType, "Reason", "message")
				if tc.wantWritten {
					eventually(t, 5*time.Second, "written", func() bool { return len(listEvents(t, client)) == 1 })
					if n := attempts.Load(); n != 3 {
						t.Errorf("written at attempt %d, want 3", n)
					}
					return
				}
				eventually(t, 5*time.Second, "dropped", func() bool { return dropped.get(eventType, CauseRejected) == 1 })
				time.Sleep(20 * time.Millisecond)
				if n := attempts.Load(); n != 1 {
					t.Errorf("%d attempts, want 1", n)
				}
				if events := listEvents(t, client); len(events) != 0 {
					t.Errorf("events = %+v, want none", events)
				}
			})
		}
	}
}

func TestSpamFilterDropsAreCounted(t *testing.T) {
	client := fake.NewClientset()
	var dropped drops
	rec := New(ktesting.NewLogger(t, ktesting.NewConfig()), client.CoreV1(), scheme.Scheme,
		Options{Source: source, Dropped: dropped.add, Correlator: record.CorrelatorOptions{BurstSize: 1}})
	start(t, rec)
	emitter := podevents.NewEmitter(rec)
	emitter.Emit([]cache.PodRef{pod(1)}, v1.EventTypeWarning, podevents.ReasonFailedAttach, "first")
	emitter.Emit([]cache.PodRef{pod(1)}, v1.EventTypeWarning, podevents.ReasonFailedAttach, "second")
	eventually(t, 5*time.Second, "one dropped by the spam filter", func() bool { return dropped.get(v1.EventTypeWarning, CauseSpamFilter) == 1 })
	if events := listEvents(t, client); len(events) != 1 || events[0].Message != "first" {
		t.Errorf("events = %+v, want the first only", events)
	}
}

func TestStopsWhenTheContextEnds(t *testing.T) {
	client := fake.NewClientset()
	var attempts atomic.Int64
	client.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		attempts.Add(1)
		return true, nil, errors.New("connection refused")
	})
	rec := New(ktesting.NewLogger(t, ktesting.NewConfig()), client.CoreV1(), scheme.Scheme, Options{Source: source, RetryDelay: time.Hour})
	stop := start(t, rec)
	emitter := podevents.NewEmitter(rec)
	emitter.Emit([]cache.PodRef{pod(1)}, v1.EventTypeWarning, podevents.ReasonFailedAttach, "m")
	emitter.Emit([]cache.PodRef{pod(2)}, v1.EventTypeNormal, podevents.ReasonSuccessfulAttach, "m")
	eventually(t, 5*time.Second, "both tried", func() bool { return attempts.Load() == 2 })
	stop()
	emitter.Emit([]cache.PodRef{pod(3)}, v1.EventTypeWarning, podevents.ReasonFailedAttach, "m")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.waiting) != 0 || len(rec.retrying) != 0 {
		t.Errorf("%d events kept, %d waiting for another try, after the recorder stopped", len(rec.waiting), len(rec.retrying))
	}
}
