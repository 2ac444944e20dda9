package eventsink

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
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
