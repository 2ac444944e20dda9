package eventsink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/podevents"
)

// heldSink is an API server that answers an event write only when the test
// lets one through, and records what was on its way at once.
type heldSink struct {
	typedcorev1.EventInterface
	answer chan struct{}

	mu                     sync.Mutex
	perObject              map[types.UID]int
	onTheirWay, mostAtOnce int
	twoOfOneObject         bool
	written                []string
}

func (s *heldSink) Events(string) typedcorev1.EventInterface { return s }

func (s *heldSink) CreateWithEventNamespaceWithContext(ctx context.Context, e *v1.Event) (*v1.Event, error) {
	uid := e.InvolvedObject.UID
	s.mu.Lock()
	s.onTheirWay++
	s.mostAtOnce = max(s.mostAtOnce, s.onTheirWay)
	s.perObject[uid]++
	s.twoOfOneObject = s.twoOfOneObject || s.perObject[uid] > 1
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.onTheirWay--
		s.perObject[uid]--
	}()
	select {
	case <-s.answer:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.written = append(s.written, e.InvolvedObject.Name+": "+e.Message)
	return e, nil
}

func (s *heldSink) state() (onTheirWay, mostAtOnce int, twoOfOneObject bool, written []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.onTheirWay, s.mostAtOnce, s.twoOfOneObject, slices.Clone(s.written)
}

// TestWritersSendEventsOfDifferentObjectsAtOnce: while the API server holds the
// writes, DefaultWriters events are on their way at once, each about a different
// object; the later events of an object wait for its earlier one, and are written
// in the order they came.
func TestWritersSendEventsOfDifferentObjectsAtOnce(t *testing.T) {
	sink := &heldSink{answer: make(chan struct{}), perObject: map[types.UID]int{}}
	rec := New(ktesting.NewLogger(t, ktesting.NewConfig()), sink, scheme.Scheme, Options{Source: source})
	emitter := podevents.NewEmitter(rec)
	busy := pod(0)
	for i := range 3 {
		emitter.Emit([]cache.PodRef{busy}, v1.EventTypeNormal, "Reason", fmt.Sprintf("m%d", i))
	}
	const others = 5
	for i := 1; i <= others; i++ {
		emitter.Emit([]cache.PodRef{pod(i)}, v1.EventTypeNormal, "Reason", "m0")
	}
	start(t, rec)

	eventually(t, 5*time.Second, fmt.Sprintf("%d writes on their way", DefaultWriters), func() bool {
		onTheirWay, _, _, _ := sink.state()
		return onTheirWay == DefaultWriters
	})
	total := 3 + others
	for range total {
		select {
		case sink.answer <- struct{}{}:
		case <-time.After(5 * time.Second):
			_, _, _, written := sink.state()
			t.Fatalf("no write waits for an answer, after %d written: %q", len(written), written)
		}
	}
	eventually(t, 5*time.Second, "every answered write recorded", func() bool {
		_, _, _, written := sink.state()
		return len(written) == total
	})
	_, mostAtOnce, twoOfOneObject, written := sink.state()
	if mostAtOnce != DefaultWriters {
		t.Errorf("at most %d writes on their way at once, want %d", mostAtOnce, DefaultWriters)
	}
	if twoOfOneObject {
		t.Error("two events about one object were on their way at once")
	}
	var ofBusy []string
	for _, w := range written {
		if name, msg, _ := strings.Cut(w, ": "); name == busy.Name {
			ofBusy = append(ofBusy, msg)
		}
	}
	if want := []string{"m0", "m1", "m2"}; !slices.Equal(ofBusy, want) {
		t.Errorf("%s's events written in the order %q, want %q", busy.Name, ofBusy, want)
	}
}

// failOnceSink fails the first write of the event with message failing, holds
// each write of the event with message held until the test answers it, and
// writes the others at once.
type failOnceSink struct {
	typedcorev1.EventInterface
	failing, held string
	answer        chan struct{}

	mu       sync.Mutex
	attempts map[string]int
}

func (s *failOnceSink) Events(string) typedcorev1.EventInterface { return s }

func (s *failOnceSink) CreateWithEventNamespaceWithContext(ctx context.Context, e *v1.Event) (*v1.Event, error) {
	s.mu.Lock()
	s.attempts[e.Message]++
	n := s.attempts[e.Message]
	s.mu.Unlock()
	switch {
	case e.Message == s.failing && n == 1:
		return nil, apierrors.NewInternalError(errors.New("etcd leader changed"))
	case e.Message == s.held:
		select {
		case <-s.answer:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return e, nil
}

func (s *failOnceSink) attemptsOf(message string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts[message]
}

// TestARetryWaitsForItsObjectsEventOnItsWay: an event due for another try is
// not sent while another event about its object is on its way, and is sent once
// that one comes back.
func TestARetryWaitsForItsObjectsEventOnItsWay(t *testing.T) {
	sink := &failOnceSink{failing: "first", held: "second", answer: make(chan struct{}), attempts: map[string]int{}}
	rec := New(ktesting.NewLogger(t, ktesting.NewConfig()), sink, scheme.Scheme, Options{Source: source, RetryDelay: 10 * time.Millisecond})
	start(t, rec)
	emitter := podevents.NewEmitter(rec)
	p := pod(0)
	emitter.Emit([]cache.PodRef{p}, v1.EventTypeNormal, "Reason", "first")
	eventually(t, 5*time.Second, "the first event tried", func() bool { return sink.attemptsOf("first") == 1 })
	emitter.Emit([]cache.PodRef{p}, v1.EventTypeNormal, "Reason", "second")
	eventually(t, 5*time.Second, "the second event on its way", func() bool { return sink.attemptsOf("second") == 1 })
	time.Sleep(100 * time.Millisecond)
	if n := sink.attemptsOf("first"); n != 1 {
		t.Fatalf("the first event was tried %d times while the second, about the same pod, was on its way; want 1", n)
	}
	sink.answer <- struct{}{}
	eventually(t, 5*time.Second, "the first event tried again", func() bool { return sink.attemptsOf("first") == 2 })
}
