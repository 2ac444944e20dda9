package leasewatch_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/leasewatch"
)

const (
	namespace = "kube-system"
	leaseName = "attachdetach-controller"
	lease     = 15 * time.Second
	retry     = 2 * time.Second
)

// holder writes the Lease as another replica's elector would.
type holder struct {
	client *fake.Clientset
	rv     int
}

func (h *holder) write(t *testing.T, identity string, duration time.Duration) {
	t.Helper()
	h.rv++
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: leaseName, ResourceVersion: strconv.Itoa(h.rv)},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(identity),
			LeaseDurationSeconds: ptr.To(int32(duration / time.Second)),
			RenewTime:            ptr.To(metav1.NewMicroTime(time.Now())),
		},
	}
	leases := h.client.CoordinationV1().Leases(namespace)
	if h.rv == 1 {
		if _, err := leases.Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, err := leases.Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// standby runs a replica "standby" as the controller does: the tracker's watch,
// its wait, then client-go's elector on the tracked lock. It returns when the
// replica became the leader, or zero if it has not when the test's last step
// ends.
func standby(t *testing.T, client *fake.Clientset) func() time.Time {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	tracker := leasewatch.New("standby", nil)
	lock := tracker.Lock(&resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: leaseName},
		Client:     tracker.Leases(client.CoordinationV1()),
		LockConfig: resourcelock.ResourceLockConfig{Identity: "standby"},
	})
	var mu sync.Mutex
	var led time.Time
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: lease, RenewDeadline: 10 * time.Second, RetryPeriod: retry,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				mu.Lock()
				defer mu.Unlock()
				led = time.Now()
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if err := tracker.Watch(ctx, client, namespace, leaseName); err != nil {
			t.Error(err)
			return
		}
		tracker.Await(ctx, lease)
		elector.Run(ctx)
	}()
	return func() time.Time {
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		return led
	}
}

// TestTakesOverWhenTheLeaseRunsOut: the standby takes the Lease the lease
// duration after the holder's last renewal, not before, and not at its elector's
// next attempt after that (up to 4.4 s later), nor after counting the duration
// from its own later sight of the renewal.
func TestTakesOverWhenTheLeaseRunsOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &holder{client: fake.NewClientset()}
		h.write(t, "old", lease)
		ledAt := standby(t, h.client)
		var last time.Time
		for range 10 {
			time.Sleep(1300 * time.Millisecond)
			h.write(t, "old", lease)
			last = time.Now()
		}
		time.Sleep(lease - time.Millisecond)
		if led := ledAt(); !led.IsZero() {
			t.Fatalf("led %s after the last renewal, before the lease ran out", led.Sub(last))
		}
		time.Sleep(time.Second)
		led := ledAt()
		if led.IsZero() {
			t.Fatalf("not leading %s after the last renewal", time.Since(last))
		}
		if got := led.Sub(last); got != lease {
			t.Errorf("led %s after the last renewal, want %s", got, lease)
		}
	})
}

// TestTakesOverAtOnceWhenReleased: a holder that releases the Lease (no holder,
// a 1 s lease, as client-go's ReleaseOnCancel writes it) hands over at once.
func TestTakesOverAtOnceWhenReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &holder{client: fake.NewClientset()}
		h.write(t, "old", lease)
		ledAt := standby(t, h.client)
		time.Sleep(5 * time.Second)
		h.write(t, "", time.Second)
		released := time.Now()
		if led := ledAt(); led.IsZero() || led.Sub(released) != 0 {
			t.Errorf("led at %v, want at the release", led)
		}
	})
}

// TestAStalledWatchDoesNotLetTheStandbyTakeAHeldLease: with a watch that shows
// nothing after its list, the holder's renewals are seen only by the elector's
// reads, and the standby does not take the Lease while they go on; once they
// stop, it takes it as client-go alone would: the lease duration after its
// elector first read the last one (up to one attempt, 2.2 retry periods, after
// it was written), at the latest one attempt later.
func TestAStalledWatchDoesNotLetTheStandbyTakeAHeldLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &holder{client: fake.NewClientset()}
		h.write(t, "old", lease)
		h.client.PrependWatchReactor("leases", func(clienttesting.Action) (bool, watch.Interface, error) {
			return true, watch.NewFake(), nil
		})
		ledAt := standby(t, h.client)
		var last time.Time
		for range 60 {
			time.Sleep(retry)
			h.write(t, "old", lease)
			last = time.Now()
			if led := ledAt(); !led.IsZero() {
				t.Fatalf("took the Lease while its holder renewed it every %s", retry)
			}
		}
		time.Sleep(lease + 2*(retry+retry*12/10))
		led := ledAt()
		if led.IsZero() {
			t.Fatalf("not leading %s after the last renewal", time.Since(last))
		}
		if got := led.Sub(last); got < lease {
			t.Errorf("led %s after the last renewal, before the lease ran out", got)
		}
	})
}

// TestReadsReportALeaseAsFreeOnlyOnceItRanOut: the lock reports a Lease held
// by another replica without a holder once the version read has gone its lease
// duration since this replica first saw it, and not a renewed one, its own or
// one already free.
func TestReadsReportALeaseAsFreeOnlyOnceItRanOut(t *testing.T) {
	tests := []struct {
		name     string
		holder   string
		renew    bool
		wait     time.Duration
		wantRead string
	}{
		{name: "another's, unchanged for the lease duration: free", holder: "old", wait: lease, wantRead: ""},
		{name: "another's, unchanged for less", holder: "old", wait: lease - time.Millisecond, wantRead: "old"},
		{name: "another's, renewed in between", holder: "old", renew: true, wait: lease, wantRead: "old"},
		{name: "this replica's", holder: "standby", wait: time.Hour, wantRead: "standby"},
		{name: "released", holder: "", wait: time.Hour, wantRead: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := &holder{client: fake.NewClientset()}
				h.write(t, tc.holder, lease)
				tracker := leasewatch.New("standby", nil)
				lock := tracker.Lock(&resourcelock.LeaseLock{
					LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: leaseName},
					Client:     tracker.Leases(h.client.CoordinationV1()),
					LockConfig: resourcelock.ResourceLockConfig{Identity: "standby"},
				})
				if _, _, err := lock.Get(t.Context()); err != nil {
					t.Fatal(err)
				}
				if tc.renew {
					time.Sleep(tc.wait / 2)
					h.write(t, tc.holder, lease)
					time.Sleep(tc.wait / 2)
				} else {
					time.Sleep(tc.wait)
				}
				rec, _, err := lock.Get(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				if rec.HolderIdentity != tc.wantRead {
					t.Errorf("holder %q read as %q, want %q", tc.holder, rec.HolderIdentity, tc.wantRead)
				}
			})
		})
	}
}

// TestTellsEachNewHolderOnce: the standby hears of each other replica that takes
// the Lease once, not at each of its renewals, and not of itself.
func TestTellsEachNewHolderOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &holder{client: fake.NewClientset()}
		h.write(t, "old", lease)
		var mu sync.Mutex
		var told []string
		tracker := leasewatch.New("standby", func(holder string) {
			mu.Lock()
			defer mu.Unlock()
			told = append(told, holder)
		})
		if err := tracker.Watch(t.Context(), h.client, namespace, leaseName); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"old", "old", "new", "new", "standby", "old"} {
			time.Sleep(retry)
			h.write(t, id, lease)
		}
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"old", "new", "old"}; !slices.Equal(told, want) {
			t.Errorf("told of holders %q, want %q", told, want)
		}
	})
}
