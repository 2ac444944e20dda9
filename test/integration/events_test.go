package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/eventsink"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/podevents"
)

// TestEventBurstReachesTheAPIServer sends a "Waiting for detach" warning and a
// SuccessfulAttachVolume event to each of 1,000 pods at once through the
// controller's event writer, to kube-apiserver at a client rate limit, with room
// for 100 normal events waiting: every warning is stored, and every normal event
// is stored or counted in attachdetach_controller_events_dropped_total.
// (TestBurstOfFiveThousand in pkg/eventsink sends 5,000 to a fake API server.)
func TestEventBurstReachesTheAPIServer(t *testing.T) {
	const pods, qps, maxQueuedNormal = 1000, 1000, 100
	w := suite.NewWorld(t, env.Client, "t-events-"+rand.String(5), "unused.example.com", nil)
	t.Cleanup(func() {
		if err := env.Client.CoreV1().Namespaces().Delete(context.Background(), w.Namespace, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	})
	cfg := env.AdminConfig()
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(qps, 50)
	client, err := kubernetes.NewForConfig(cfg)
	w.Must(err)
	m := metrics.New()
	rec := eventsink.New(klog.Background(), client.CoreV1(), scheme.Scheme, eventsink.Options{
		Source:          v1.EventSource{Component: podevents.Component},
		Dropped:         m.ObserveDroppedEvent,
		MaxQueuedNormal: maxQueuedNormal,
	})
	ctx, stop := context.WithCancel(context.Background())
	var writer sync.WaitGroup
	writer.Go(func() { rec.Run(ctx) })
	defer writer.Wait()
	defer stop()

	began := time.Now()
	emitter := podevents.NewEmitter(rec)
	for i := range pods {
		p := cache.PodRef{Namespace: w.Namespace, Name: fmt.Sprintf("pod-%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}
		emitter.Emit([]cache.PodRef{p}, v1.EventTypeWarning, podevents.ReasonFailedAttach,
			podevents.WaitingForDetach("pv-"+p.Name, p.Namespace, []cache.PodRef{{Namespace: p.Namespace, Name: "holder"}}))
		emitter.Emit([]cache.PodRef{p}, v1.EventTypeNormal, podevents.ReasonSuccessfulAttach, podevents.AttachSucceeded("pv-"+p.Name))
	}
	count := func(eventType string) int {
		list, err := env.Client.CoreV1().Events(w.Namespace).List(t.Context(), metav1.ListOptions{FieldSelector: "type=" + eventType})
		w.Must(err)
		return len(list.Items)
	}
	dropped := func(eventType, cause string) int {
		return int(testutil.ToFloat64(m.EventsDropped.WithLabelValues(eventType, cause)))
	}
	var warnings, normal int
	defer func() {
		if t.Failed() {
			t.Logf("after %s: warnings stored %d; normal stored %d, dropped %d", time.Since(began).Round(time.Millisecond),
				warnings, normal, dropped(v1.EventTypeNormal, eventsink.CauseQueueFull))
		}
	}()
	suite.Eventually(t, time.Minute, "every event written or counted as dropped", func() bool {
		warnings, normal = count(v1.EventTypeWarning), count(v1.EventTypeNormal)
		return warnings == pods && normal+dropped(v1.EventTypeNormal, eventsink.CauseQueueFull) == pods
	})
	t.Logf("%d pods at %d writes/s: warnings stored %d; normal stored %d, dropped %d; in %s",
		pods, qps, warnings, normal, dropped(v1.EventTypeNormal, eventsink.CauseQueueFull), time.Since(began).Round(time.Millisecond))
	for _, eventType := range []string{v1.EventTypeNormal, v1.EventTypeWarning} {
		for _, cause := range []string{eventsink.CauseSpamFilter, eventsink.CauseRejected, eventsink.CauseRetryLimit} {
			if n := dropped(eventType, cause); n != 0 {
				t.Errorf("%d %s events dropped for %s", n, eventType, cause)
			}
		}
	}
}
