package controller

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/interleave"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// holdFirst holds the first goroutine that reaches one meeting point for one item
// until release is closed; every other meeting point goes on at once.
type holdFirst struct {
	point, id string
	reached   chan struct{}
	release   chan struct{}
	once      sync.Once
}

func (h *holdFirst) At(point, id string) {
	if point != h.point || id != h.id {
		return
	}
	first := false
	h.once.Do(func() { first = true })
	if first {
		close(h.reached)
		<-h.release
	}
}

// TestAPodEndedBeforeItsEvaluationCountsUntilItEnded: the populator evaluates a
// pod from the informer's cache, some time after the event that queued it. A pod
// that came and went, or came and terminated, in that time no longer counts when
// its evaluation runs, so the desired state never holds it; its volumes still
// count as needed on its node until its end was seen, or a wait for unmount that
// began before the pod came could force-detach a volume it had mounted
// (simulation seed 922).
func TestAPodEndedBeforeItsEvaluationCountsUntilItEnded(t *testing.T) {
	tests := []struct {
		name string
		end  func(ctx context.Context, pods typedcorev1.PodInterface) error
		// ended tells whether the informer's cache shows the end.
		ended func(pod *v1.Pod, err error) bool
	}{
		{
			name: "deleted",
			end: func(ctx context.Context, pods typedcorev1.PodInterface) error {
				return pods.Delete(ctx, "db", metav1.DeleteOptions{})
			},
			ended: func(_ *v1.Pod, err error) bool { return apierrors.IsNotFound(err) },
		},
		{
			name: "terminated",
			end: func(ctx context.Context, pods typedcorev1.PodInterface) error {
				pod := podUsing("ns", "db", "node-a", "data")
				pod.Status.Phase = v1.PodSucceeded
				_, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
				return err
			},
			ended: func(pod *v1.Pod, err error) bool { return err == nil && pod.Status.Phase == v1.PodSucceeded },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hold := &holdFirst{point: "pod", id: "ns/db", reached: make(chan struct{}), release: make(chan struct{})}
			ctx, cancel := context.WithCancel(interleave.WithScheduler(context.Background(), hold))
			released := sync.OnceFunc(func() { close(hold.release) })
			c := newTestController(t, csiPV("pv-1", "h-1", "ns", "data", v1.ReadWriteOnce), boundClaim("ns", "data", "pv-1"))
			t.Cleanup(func() {
				released()
				cancel()
				c.factory.Shutdown()
			})
			if _, err := c.registerHandlers(ctx); err != nil {
				t.Fatal(err)
			}
			c.factory.Start(ctx.Done())
			c.factory.WaitForCacheSync(ctx.Done())
			go c.populator.Run(ctx, 1)

			pods := c.client.CoreV1().Pods("ns")
			if _, err := pods.Create(ctx, podUsing("ns", "db", "node-a", "data"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-hold.reached:
			case <-time.After(10 * time.Second):
				t.Fatal("the pod's evaluation never began")
			}
			ended := time.Now()
			if err := tc.end(ctx, pods); err != nil {
				t.Fatal(err)
			}
			if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				return tc.ended(c.informers.pods.Lister().Pods("ns").Get("db")), nil
			}); err != nil {
				t.Fatalf("waiting for the informer to show the pod's end: %v", err)
			}
			released()

			vol := volumename.CSI(testDriver, "h-1")
			if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
				until, ok := c.desired.NeededUntil(vol)["node-a"]
				return ok && !until.Before(ended), nil
			}); err != nil {
				t.Errorf("the desired state does not say the volume was needed on node-a until the pod ended (%v): %v", c.desired.NeededUntil(vol), err)
			}
			if keys := c.desired.PodKeys(); len(keys) != 0 {
				t.Errorf("the desired state holds %q, want no pod", keys)
			}
		})
	}
}
