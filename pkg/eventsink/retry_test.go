package eventsink

import (
	"errors"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/podevents"
)

// failingNamespace is a namespace whose events the API server always answers
// with a 500, as it does when a failing admission webhook covers it.
const failingNamespace = "ns-webhook"

// failEventsIn makes the API server answer every event write in the namespace
// with a 500, and returns how many it answered so.
func failEventsIn(client *fake.Clientset, namespace string) (attempts func() int) {
	var mu sync.Mutex
	n := 0
	client.PrependReactor("*", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() != namespace {
			return false, nil, nil
		}
		mu.Lock()
		defer mu.Unlock()
		n++
		return true, nil, apierrors.NewInternalError(errors.New(`failed calling webhook "events.example.com": connection refused`))
	})
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// TestAnEventTheServerAlwaysFailsDelaysNoOther: one warning's write always
// fails with an error that may pass. Every event after it, warnings included,
// is written at once: the failing one waits for its own next try, not at the
// head of the line. Before, the single writer tried it again every RetryDelay
// and wrote nothing else meanwhile, for ever.
func TestAnEventTheServerAlwaysFailsDelaysNoOther(t *testing.T) {
	client := fake.NewClientset()
	attempts := failEventsIn(client, failingNamespace)
	rec := New(ktesting.NewLogger(t, ktesting.NewConfig()), client.CoreV1(), scheme.Scheme, Options{Source: source, RetryDelay: time.Hour})
	start(t, rec)
	emitter := podevents.NewEmitter(rec)
	emitter.Emit([]cache.PodRef{{Namespace: failingNamespace, Name: "db-0", UID: "uid-bad"}}, v1.EventTypeWarning, podevents.ReasonFailedAttach, "m")
	eventually(t, 5*time.Second, "tried once", func() bool { return attempts() == 1 })
	for i := range 3 {
		emitter.Emit([]cache.PodRef{pod(i)}, v1.EventTypeWarning, podevents.ReasonFailedAttach, "m")
		emitter.Emit([]cache.PodRef{pod(i)}, v1.EventTypeNormal, podevents.ReasonSuccessfulAttach, "m")
	}
	eventually(t, 5*time.Second, "the six later events written", func() bool { return len(listEvents(t, client)) == 6 })
}

// TestAnEventIsGivenUpAfterClientGosNumberOfTries: an event whose write keeps
// failing with an error that may pass is tried MaxTries times in all, as
// client-go's broadcaster does (maxTriesPerEvent), then dropped and counted.
func TestAnEventIsGivenUpAfterClientGosNumberOfTries(t *testing.T) {
	for _, eventType := range []string{v1.EventTypeWarning, v1.EventTypeNormal} {
		t.Run(eventType, func(t *testing.T) {
			client := fake.NewClientset()
			attempts := failEventsIn(client, failingNamespace)
			var dropped drops
			rec := New(ktesting.NewLogger(t, ktesting.NewConfig()), client.CoreV1(), scheme.Scheme,
				Options{Source: source, RetryDelay: time.Millisecond, Dropped: dropped.add})
			start(t, rec)
			podevents.NewEmitter(rec).Emit([]cache.PodRef{{Namespace: failingNamespace, Name: "db-0", UID: "uid-bad"}}, eventType, "Reason", "m")
			eventually(t, 5*time.Second, "dropped", func() bool { return dropped.get(eventType, CauseRetryLimit) == 1 })
			time.Sleep(50 * time.Millisecond)
			if n := attempts(); n != DefaultMaxTries {
				t.Errorf("%d tries, want %d", n, DefaultMaxTries)
			}
			if DefaultMaxTries != 12 {
				t.Errorf("DefaultMaxTries = %d, want client-go's maxTriesPerEvent, 12", DefaultMaxTries)
			}
		})
	}
}
