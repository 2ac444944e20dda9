// Package eventsink writes the controller's events to the API server in place of
// client-go's event broadcaster, which silently drops whatever finds 1,000 events
// already queued, warnings included.
//
// Warnings wait for as long as it takes: a repeat of a warning still waiting
// (same object, type, reason and message) is folded into it, so memory grows
// with the number of distinct warnings, not with the burst. Normal events are
// folded the same way and wait in a queue of bounded length, long enough for one
// event per pod of a burst of 50,000 attaches; one that finds it full is dropped
// and reported to Options.Dropped. Options.Writers writers send them, warnings
// first, at the rate limit of the client they are given, through client-go's
// EventCorrelator, so that repeats are counted on one Event, similar events are
// aggregated and an object that gets too many events is filtered exactly as
// client-go's broadcaster does. No two events about one object are on their way
// at once: each object's events are correlated and written in the order they came.
// Several writers keep the rate limit's pace when the API server is slow to
// answer, where one writer would send one event per round trip.
//
// An event whose write fails with an error that may pass is tried again after
// RetryDelay, MaxTries times in all as client-go's broadcaster does, then
// dropped. It waits for its next try on its own, not at the head of the line: an
// event the API server keeps failing (a failing admission webhook on its
// namespace) delays no other.
package eventsink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	recordutil "k8s.io/client-go/tools/record/util"
	"k8s.io/client-go/tools/reference"
	"k8s.io/klog/v2"
)

// Why an event was not written, as reported to Options.Dropped.
const (
	// CauseQueueFull: a normal event found MaxQueuedNormal events waiting.
	CauseQueueFull = "queue_full"
	// CauseSpamFilter: client-go's per-object spam filter refused it (by default
	// 25 events of one type about one object, then one every 5 minutes).
	CauseSpamFilter = "spam_filter"
	// CauseRejected: the API server refused it for good (invalid, its namespace
	// terminating, already existing).
	CauseRejected = "rejected"
	// CauseRetryLimit: its write failed MaxTries times with errors that may
	// pass (no answer, or the server overloaded or failing).
	CauseRetryLimit = "retry_limit"
)

// Defaults of Options.
const (
	// DefaultMaxQueuedNormal bounds the memory of normal events waiting: about
	// 540 bytes each, so 27 MiB at most. It is 50 times client-go's broadcaster
	// queue, which drops events beyond 1,000 waiting: a burst of 50,000
	// attaches, 5,000 nodes of ten, gets every SuccessfulAttachVolume written.
	DefaultMaxQueuedNormal = 50000
	// DefaultRetryDelay is client-go's wait before it writes an event again
	// after an error that may pass.
	DefaultRetryDelay = 10 * time.Second
	// DefaultMaxTries is client-go's number of tries of one event.
	DefaultMaxTries = 12
	// DefaultWriters keeps the default --event-qps of 10 while the API server
	// takes up to 400 ms to answer an event write, as it did under a burst of
	// 50,000 attaches on the benchmark's two cores (about 370 ms; one writer
	// then wrote fewer than 3 events a second).
	DefaultWriters = 4
)

// maxScan is how far into the waiting events a writer looks for one whose
// object has no event on its way, before it waits for one to come back.
const maxScan = 100

// Options configure a Recorder.
type Options struct {
	// Source is the component (and host) the events are from.
	Source v1.EventSource
	// MaxQueuedNormal is how many normal events may wait to be written;
	// DefaultMaxQueuedNormal if 0.
	MaxQueuedNormal int
	// RetryDelay is the wait before writing an event again after a transport
	// error or a server error that may pass; DefaultRetryDelay if 0.
	RetryDelay time.Duration
	// MaxTries is how many times an event is tried before it is dropped;
	// DefaultMaxTries if 0.
	MaxTries int
	// Writers is how many events may be on their way to the API server at
	// once, each about a different object; DefaultWriters if 0.
	Writers int
	// Correlator configures client-go's EventCorrelator; the zero value is
	// client-go's defaults, those of its broadcaster.
	Correlator record.CorrelatorOptions
	// Dropped, if set, is called once for each event not written, with its type
	// and one of the causes above.
	Dropped func(eventType, cause string)
}

// Recorder is a record.EventRecorder that queues events for Run to write.
type Recorder struct {
	client typedcorev1.EventsGetter
	scheme *runtime.Scheme
	opts   Options
	logger klog.Logger
	wake   chan struct{}

	mu sync.Mutex
	// waiting holds the queued events by what they say; warnings and normals
	// hold them in the order they came.
	waiting           map[eventKey]*queued
	warnings, normals []*queued
	// retrying holds the events whose write failed and that wait for their
	// next try, each until its own time; retryingNormal counts the normal ones,
	// which take their place in the normal events' bound.
	retrying       []*attempt
	retryingNormal int
	// sending holds the objects that have an event on its way.
	sending map[objectRef]bool
	stopped bool
}

// objectRef identifies the object of an event, whatever its version.
type objectRef struct {
	kind, namespace, name string
	uid                   types.UID
}

func objectOf(e *v1.Event) objectRef {
	o := e.InvolvedObject
	return objectRef{kind: o.Kind, namespace: o.Namespace, name: o.Name, uid: o.UID}
}

// eventKey identifies the repeats of one event: the same object, type, reason
// and message (all of a Recorder's events have the same source).
type eventKey struct {
	object                     objectRef
	apiVersion, fieldPath      string
	eventType, reason, message string
}

// queued is an event waiting to be written, as small as it can be kept: the
// v1.Event is made only when a writer takes it.
type queued struct {
	key             eventKey
	resourceVersion string
	annotations     map[string]string
	first, last     metav1.Time
}

// event is the Event to write for q, as client-go's recorder makes it.
func (q *queued) event(source v1.EventSource) *v1.Event {
	k := q.key
	namespace := k.object.namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	return &v1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:        recordutil.GenerateEventName(k.object.name, q.first.UnixNano()),
			Namespace:   namespace,
			Annotations: q.annotations,
		},
		InvolvedObject: v1.ObjectReference{
			Kind: k.object.kind, Namespace: k.object.namespace, Name: k.object.name, UID: k.object.uid,
			APIVersion: k.apiVersion, ResourceVersion: q.resourceVersion, FieldPath: k.fieldPath,
		},
		Reason:              k.reason,
		Message:             k.message,
		FirstTimestamp:      q.first,
		LastTimestamp:       q.last,
		Count:               1,
		Type:                k.eventType,
		Source:              source,
		ReportingController: source.Component,
		ReportingInstance:   source.Host,
	}
}

// attempt is an event on its way to the API server: what the correlator made of
// it, how many times it was tried, and when it may be tried next.
type attempt struct {
	eventType string
	result    *record.EventCorrelateResult
	tries     int
	due       time.Time
}

var _ record.EventRecorder = (*Recorder)(nil)

// New returns a Recorder that writes through client, which carries the event
// rate limit, and refers to objects through scheme. Nothing is written until Run.
func New(logger klog.Logger, client typedcorev1.EventsGetter, scheme *runtime.Scheme, opts Options) *Recorder {
	if opts.MaxQueuedNormal == 0 {
		opts.MaxQueuedNormal = DefaultMaxQueuedNormal
	}
	if opts.RetryDelay == 0 {
		opts.RetryDelay = DefaultRetryDelay
	}
	if opts.MaxTries == 0 {
		opts.MaxTries = DefaultMaxTries
	}
	if opts.Writers == 0 {
		opts.Writers = DefaultWriters
	}
	return &Recorder{
		client:  client,
		scheme:  scheme,
		opts:    opts,
		logger:  logger,
		wake:    make(chan struct{}, 1),
		waiting: map[eventKey]*queued{},
		sending: map[objectRef]bool{},
	}
}

// Event queues an event about object.
func (r *Recorder) Event(object runtime.Object, eventtype, reason, message string) {
	r.record(object, nil, eventtype, reason, message)
}

// Eventf queues an event about object with a formatted message.
func (r *Recorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.record(object, nil, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

// AnnotatedEventf queues an event about object with annotations and a formatted
// message.
func (r *Recorder) AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.record(object, annotations, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (r *Recorder) record(object runtime.Object, annotations map[string]string, eventtype, reason, message string) {
	ref, err := reference.GetReference(r.scheme, object)
	if err != nil {
		r.logger.Error(err, "Cannot refer to the object of an event, not recording it", "type", eventtype, "reason", reason, "message", message)
		return
	}
	if !recordutil.ValidateEventType(eventtype) {
		r.logger.Error(nil, "Unsupported event type, not recording the event", "type", eventtype, "reason", reason, "message", message)
		return
	}
	now := metav1.Now()
	q := &queued{
		key: eventKey{
			object:     objectRef{kind: ref.Kind, namespace: ref.Namespace, name: ref.Name, uid: ref.UID},
			apiVersion: ref.APIVersion, fieldPath: ref.FieldPath,
			eventType: eventtype, reason: reason, message: message,
		},
		resourceVersion: ref.ResourceVersion,
		annotations:     annotations,
		first:           now,
		last:            now,
	}
	r.logger.V(3).Info("Event occurred", "object", klog.KRef(ref.Namespace, ref.Name), "kind", ref.Kind, "type", eventtype, "reason", reason, "message", message)
	if !r.enqueue(q) {
		r.logger.V(3).Info("Too many normal events waiting to be written, dropped one", "object", klog.KRef(ref.Namespace, ref.Name), "reason", reason, "limit", r.opts.MaxQueuedNormal)
		r.dropped(eventtype, CauseQueueFull)
	}
}

// enqueue queues the event, or folds it into the same one already waiting. It
// returns false only for a normal event that found the queue full.
func (r *Recorder) enqueue(q *queued) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return true
	}
	if same, ok := r.waiting[q.key]; ok {
		same.last = q.last
		return true
	}
	if q.key.eventType == v1.EventTypeWarning {
		r.warnings = append(r.warnings, q)
	} else {
		if len(r.normals)+r.retryingNormal >= r.opts.MaxQueuedNormal {
			return false
		}
		r.normals = append(r.normals, q)
	}
	r.waiting[q.key] = q
	r.wakeOne()
	return true
}

// next takes the event to write now, of an object with no event on its way: a
// warning due for another try, else the oldest waiting warning, else the same
// for normal events. A retry is taken at its time and no sooner, so that an event
// that keeps failing takes one write every RetryDelay and the others go past it.
// The object taken counts as sending until done. When nothing can be taken,
// next returns how long until the first retry it could take is due (0 if none
// waits).
func (r *Recorder) next(now time.Time) (retry *attempt, fresh *v1.Event, wait time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer func() { r.wakeAnotherLocked(retry != nil || fresh != nil) }()
	for _, eventType := range []string{v1.EventTypeWarning, v1.EventTypeNormal} {
		if a := r.takeDueLocked(eventType, now); a != nil {
			r.sending[objectOf(a.result.Event)] = true
			return a, nil, 0
		}
		waiting := &r.normals
		if eventType == v1.EventTypeWarning {
			waiting = &r.warnings
		}
		if q := r.takeWaitingLocked(waiting); q != nil {
			r.sending[q.key.object] = true
			return nil, q.event(r.opts.Source), 0
		}
	}
	for _, a := range r.retrying {
		if r.sending[objectOf(a.result.Event)] {
			// done wakes a writer when the object's event comes back.
			continue
		}
		if left := a.due.Sub(now); wait == 0 || left < wait {
			wait = max(left, time.Nanosecond)
		}
	}
	return nil, nil, wait
}

// wakeAnotherLocked lets one more writer look for work once this one took an
// event and others wait: an event queued wakes one writer only.
func (r *Recorder) wakeAnotherLocked(took bool) {
	if took && len(r.warnings)+len(r.normals) > 0 {
		r.wakeOne()
	}
}

func (r *Recorder) wakeOne() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// takeWaitingLocked takes the oldest of the waiting events whose object has no
// event on its way, looking at the first maxScan only.
func (r *Recorder) takeWaitingLocked(waiting *[]*queued) *queued {
	for i, q := range (*waiting)[:min(len(*waiting), maxScan)] {
		if r.sending[q.key.object] {
			continue
		}
		// The ones before it move up by one, so that the slice keeps its order
		// and drops its first element.
		copy((*waiting)[1:i+1], (*waiting)[:i])
		(*waiting)[0] = nil
		*waiting = (*waiting)[1:]
		delete(r.waiting, q.key)
		return q
	}
	return nil
}

// done marks the object of an event written, or put back for another try, as no
// longer sending, and lets a writer look for its next event.
func (r *Recorder) done(event *v1.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.sending, objectOf(event))
	r.wakeOne()
}

// takeDueLocked takes the retry of the type that has been due longest, if any,
// of an object with no event on its way.
func (r *Recorder) takeDueLocked(eventType string, now time.Time) *attempt {
	best := -1
	for i, a := range r.retrying {
		if a.eventType == eventType && !a.due.After(now) && !r.sending[objectOf(a.result.Event)] && (best < 0 || a.due.Before(r.retrying[best].due)) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	a := r.retrying[best]
	r.retrying = slices.Delete(r.retrying, best, best+1)
	if eventType != v1.EventTypeWarning {
		r.retryingNormal--
	}
	return a
}

// retryLater puts an event whose write failed back, to be tried at its time.
func (r *Recorder) retryLater(a *attempt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	r.retrying = append(r.retrying, a)
	if a.eventType != v1.EventTypeWarning {
		r.retryingNormal++
	}
}

// Run writes the queued events until ctx ends, then stops: events still waiting
// are abandoned (logged) and later ones are ignored.
func (r *Recorder) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	defer r.stop(logger)
	correlator := record.NewEventCorrelatorWithOptions(r.opts.Correlator)
	var writers sync.WaitGroup
	for range r.opts.Writers {
		writers.Go(func() { r.write(ctx, correlator) })
	}
	writers.Wait()
}

// write is one writer: it takes the next event and writes it, until ctx ends.
func (r *Recorder) write(ctx context.Context, correlator *record.EventCorrelator) {
	for ctx.Err() == nil {
		retry, fresh, wait := r.next(time.Now())
		switch {
		case retry != nil:
			r.try(ctx, correlator, retry)
			r.done(retry.result.Event)
		case fresh != nil:
			if a := r.correlate(ctx, correlator, fresh); a != nil {
				r.try(ctx, correlator, a)
			}
			r.done(fresh)
		default:
			r.sleep(ctx, wait)
		}
	}
}

// sleep waits for a new event, for the first retry to be due (wait, unless
// 0), or for ctx to end.
func (r *Recorder) sleep(ctx context.Context, wait time.Duration) {
	var due <-chan time.Time
	if wait > 0 {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		due = timer.C
	}
	select {
	case <-ctx.Done():
	case <-r.wake:
	case <-due:
	}
}

func (r *Recorder) stop(logger klog.Logger) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	if len(r.waiting) > 0 || len(r.retrying) > 0 {
		logger.Info("Stopped writing events; abandoning those still waiting", "warnings", len(r.warnings), "normal", len(r.normals), "retrying", len(r.retrying))
	}
	r.waiting, r.warnings, r.normals, r.retrying, r.retryingNormal, r.sending = nil, nil, nil, nil, 0, nil
}

func eventLogger(ctx context.Context, event *v1.Event) klog.Logger {
	return klog.FromContext(ctx).WithValues("object", klog.KRef(event.InvolvedObject.Namespace, event.InvolvedObject.Name), "type", event.Type, "reason", event.Reason)
}

// correlate passes a new event through client-go's correlator, and returns what
// is to be written, or nil if the spam filter refuses it.
func (r *Recorder) correlate(ctx context.Context, correlator *record.EventCorrelator, event *v1.Event) *attempt {
	result, err := correlator.EventCorrelate(event)
	if err != nil {
		eventLogger(ctx, event).Error(err, "Correlating an event with earlier ones failed")
	}
	if result.Skip {
		eventLogger(ctx, event).V(3).Info("Too many events about the object, dropped one (client-go's spam filter)")
		r.dropped(event.Type, CauseSpamFilter)
		return nil
	}
	return &attempt{eventType: event.Type, result: result}
}

// try writes the event once. One that fails with an error that may pass is put
// back for another try after RetryDelay, until it has been tried MaxTries
// times, as client-go's broadcaster does; every event has its own tries and its
// own time, so none waits behind another that keeps failing.
func (r *Recorder) try(ctx context.Context, correlator *record.EventCorrelator, a *attempt) {
	event := a.result.Event
	logger := eventLogger(ctx, event)
	err := r.send(ctx, correlator, a.result)
	a.tries++
	switch {
	case err == nil, ctx.Err() != nil:
		return
	case !mayPass(err):
		if apierrors.IsAlreadyExists(err) || apierrors.HasStatusCause(err, v1.NamespaceTerminatingCause) {
			logger.V(5).Info("API server refused an event, not retrying", "err", err)
		} else {
			logger.Error(err, "API server refused an event, not retrying", "message", event.Message)
		}
		r.dropped(event.Type, CauseRejected)
	case a.tries >= r.opts.MaxTries:
		logger.Error(err, "Writing an event failed, giving up", "tries", a.tries, "message", event.Message)
		r.dropped(event.Type, CauseRetryLimit)
	default:
		logger.Error(err, "Writing an event failed, retrying", "after", r.opts.RetryDelay, "tries", a.tries)
		a.due = time.Now().Add(r.opts.RetryDelay)
		r.retryLater(a)
	}
}

// send writes one correlated event: a patch of the Event already written for
// its earlier occurrences, or, for a first occurrence or when that Event is gone,
// a new Event. The correlator learns the Event as the server returned it. It
// calls the typed client's context-aware methods rather than client-go's
// EventSinkImpl, whose requests cannot be cancelled: a write waiting for the rate
// limit, or hanging, must end with ctx when the leader stops.
func (r *Recorder) send(ctx context.Context, correlator *record.EventCorrelator, result *record.EventCorrelateResult) error {
	events := r.client.Events("")
	var written *v1.Event
	var err error
	repeat := result.Event.Count > 1
	if repeat {
		written, err = events.PatchWithEventNamespaceWithContext(ctx, result.Event, result.Patch)
	}
	if !repeat || apierrors.IsNotFound(err) {
		fresh := result.Event.DeepCopy()
		fresh.ResourceVersion = ""
		written, err = events.CreateWithEventNamespaceWithContext(ctx, fresh)
	}
	if err != nil {
		return fmt.Errorf("writing event %s/%s: %w", result.Event.Namespace, result.Event.Name, err)
	}
	correlator.UpdateState(written)
	return nil
}

// mayPass tells errors worth retrying: no answer from the server (as client-go's
// broadcaster retries), or an answer saying it is overloaded or failing for now.
func mayPass(err error) bool {
	var construction *rest.RequestConstructionError
	if errors.As(err, &construction) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsUnexpectedServerError(err)
}

func (r *Recorder) dropped(eventType, cause string) {
	if r.opts.Dropped != nil {
		r.opts.Dropped(eventType, cause)
	}
}
