package statusupdater_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/statusupdater"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

func TestBatchWindow(t *testing.T) {
	tests := []struct {
		name                       string
		backlog, response, minimum time.Duration
		want                       time.Duration
	}{
		{name: "nothing queued, quick server: at once", want: 0},
		{name: "one request queued at 200 QPS: no fixed minimum", backlog: 5 * time.Millisecond, response: 2 * time.Millisecond, want: 5 * time.Millisecond},
		{name: "queue of 3 s", backlog: 3 * time.Second, response: 20 * time.Millisecond, want: 3 * time.Second},
		{name: "nothing queued, slow server: its response time", response: 800 * time.Millisecond, want: 800 * time.Millisecond},
		{name: "queue longer than the limit", backlog: 2 * time.Hour, want: time.Minute},
		{name: "server slower than the limit", response: 2 * time.Minute, want: time.Minute},
		{name: "the operator's minimum over a short queue", backlog: 5 * time.Millisecond, response: 2 * time.Millisecond, minimum: time.Second, want: time.Second},
		{name: "a queue longer than the operator's minimum", backlog: 3 * time.Second, minimum: time.Second, want: 3 * time.Second},
		{name: "a minimum longer than the limit", minimum: time.Hour, want: time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := statusupdater.BatchWindow(tc.backlog, tc.response, tc.minimum); got != tc.want {
				t.Errorf("BatchWindow(%s, %s, %s) = %s, want %s", tc.backlog, tc.response, tc.minimum, got, tc.want)
			}
		})
	}
}

// patchTimes records, in the harness's clock, when each status patch was sent.
func (h *harness) patchTimes() func() []time.Duration {
	start := time.Now()
	var mu sync.Mutex
	var at []time.Duration
	h.client.PrependReactor("patch", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Since(start))
		return false, nil, nil
	})
	return func() []time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(at)
	}
}

func fixedBacklog(d time.Duration) func() time.Duration { return func() time.Duration { return d } }

// TestEnqueueWritesAfterTheBacklog: a node's write waits as long as the requests
// queued for the rate limit take, and not at all when none is queued; changes in
// the window join the write.
func TestEnqueueWritesAfterTheBacklog(t *testing.T) {
	tests := []struct {
		name    string
		backlog time.Duration
		want    time.Duration
	}{
		{name: "nothing queued: written at once", backlog: 0, want: 0},
		{name: "queue of 300 ms", backlog: 300 * time.Millisecond, want: 300 * time.Millisecond},
		{name: "queue of two hours: a minute at most", backlog: 2 * time.Hour, want: time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarnessWithBacklog(t, fixedBacklog(tc.backlog), 0, managedNode("1"), managedNode("1"))
				times := h.patchTimes()
				h.attach(volA, true)
				h.updater.Enqueue(nodeName)
				time.Sleep(tc.want / 2)
				synctest.Wait()
				h.attach(volB, true)
				h.updater.Enqueue(nodeName)
				time.Sleep(tc.want + time.Second)
				synctest.Wait()
				patches := h.patches(t)
				wantPatches := 1
				if tc.want == 0 {
					// Written at once: the second change comes after the first write.
					wantPatches = 2
				}
				if got := times(); len(got) != wantPatches || got[0] != tc.want {
					t.Fatalf("patches sent at %v, want %d, the first at %s", got, wantPatches, tc.want)
				}
				if got := patchedList(t, patches[len(patches)-1]); !slices.Equal(got, []v1.AttachedVolume{csiEntry(volA), csiEntry(volB)}) {
					t.Errorf("last patch lists %v, want both volumes", got)
				}
			})
		})
	}
}

// TestASlowServerGetsFewerLargerWrites: once the API server took 400 ms to
// answer a status write, the node's next write waits that long for more
// changes, though nothing is queued for the rate limit.
func TestASlowServerGetsFewerLargerWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const slow = 400 * time.Millisecond
		h := newHarnessWithBacklog(t, fixedBacklog(0), 0, managedNode("1"), managedNode("1"))
		h.client.PrependReactor("patch", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
			time.Sleep(slow)
			return false, nil, nil
		})
		times := h.patchTimes()
		h.attach(volA, true)
		h.updater.Enqueue(nodeName)
		time.Sleep(slow + time.Millisecond)
		synctest.Wait()
		h.attach(volB, true)
		h.updater.Enqueue(nodeName)
		time.Sleep(slow / 2)
		synctest.Wait()
		h.attach(volC, true)
		h.updater.Enqueue(nodeName)
		time.Sleep(2 * slow)
		synctest.Wait()
		got := times()
		if len(got) != 2 || got[0] != 0 || got[1] != slow+time.Millisecond+slow {
			t.Fatalf("patches sent at %v, want 2: at once, then %s after the second change", got, slow)
		}
		patches := h.patches(t)
		if got := patchedList(t, patches[1]); !slices.Equal(got, []v1.AttachedVolume{csiEntry(volA), csiEntry(volB), csiEntry(volC)}) {
			t.Errorf("second patch lists %v, want the three volumes", got)
		}
	})
}

// TestAMinimumWindowWritesTheAttachesOfOneNodeTogether: with a minimum window,
// volumes attached to a node within it go out in one write, that long after the
// first, even with nothing queued and a quick server.
func TestAMinimumWindowWritesTheAttachesOfOneNodeTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const minimum = 500 * time.Millisecond
		h := newHarnessWithBacklog(t, fixedBacklog(0), minimum, managedNode("1"), managedNode("1"))
		times := h.patchTimes()
		for _, vol := range []volumename.UniqueName{volA, volB, volC} {
			h.attach(vol, true)
			h.updater.Enqueue(nodeName)
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(minimum)
		synctest.Wait()
		if got := times(); !slices.Equal(got, []time.Duration{minimum}) {
			t.Fatalf("patches sent at %v, want one, %s after the first attach", got, minimum)
		}
		if got := patchedList(t, h.patches(t)[0]); !slices.Equal(got, []v1.AttachedVolume{csiEntry(volA), csiEntry(volB), csiEntry(volC)}) {
			t.Errorf("the patch lists %v, want the three volumes", got)
		}
	})
}

// TestConfirmSharesTheBatchedWrite: detaches from one node confirm with the
// node's batched write, one patch for all of them and the attachments changed
// in the same window, and each gets a node the API server returned without its
// volume. A detach pushes the window back to the end of the backlog it saw.
func TestConfirmSharesTheBatchedWrite(t *testing.T) {
	tests := []struct {
		name    string
		backlog time.Duration
		// asks are the delays, from the attachment that opens the window, of
		// the confirmations.
		asks      []time.Duration
		maxWrites int
		// firstAt is when the first write goes out.
		firstAt time.Duration
	}{
		{
			name: "three detaches in a 1 s window: one write, once the queue the last one saw is served", backlog: time.Second,
			asks: []time.Duration{0, 100 * time.Millisecond, 900 * time.Millisecond}, maxWrites: 1, firstAt: 1900 * time.Millisecond,
		},
		{
			name: "a detach late in a long window: pushed back a minute after the window opened at most", backlog: 50 * time.Second,
			asks: []time.Duration{0, 0, 30 * time.Second}, maxWrites: 1, firstAt: time.Minute,
		},
		{name: "three detaches at the same instant, nothing queued: written at once", backlog: 0, asks: []time.Duration{0, 0, 0}, maxWrites: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				all := managedNode("1", csiEntry(volA), csiEntry(volB), csiEntry(volC))
				h := newHarnessWithBacklog(t, fixedBacklog(tc.backlog), 0, all, all.DeepCopy())
				vols := []volumename.UniqueName{volA, volB, volC}
				for _, v := range vols {
					h.attach(v, true)
				}
				d := volumename.CSI("d", "d")
				h.attach(d, true)
				// Recording starts before the worker can write.
				times := h.patchTimes()
				h.updater.Enqueue(nodeName)
				type answer struct {
					vol  volumename.UniqueName
					node *v1.Node
					err  error
				}
				answers := make(chan answer, len(vols))
				for i, v := range vols {
					go func() {
						time.Sleep(tc.asks[i])
						h.actual.HideForDetach(v, nodeName, cache.NotForced)
						n, err := h.updater.Confirm(context.Background(), nodeName)
						answers <- answer{v, n, err}
					}()
				}
				versions := map[string]bool{}
				for range vols {
					a := <-answers
					if a.err != nil {
						t.Fatalf("Confirm: %v", a.err)
					}
					if slices.ContainsFunc(a.node.Status.VolumesAttached, func(av v1.AttachedVolume) bool { return av.Name == v1.UniqueVolumeName(a.vol) }) {
						t.Errorf("confirmation for %s answered by a node that lists it: %v", a.vol, a.node.Status.VolumesAttached)
					}
					versions[a.node.ResourceVersion] = true
				}
				if len(versions) > tc.maxWrites {
					t.Errorf("confirmations answered by %d writes, want at most %d", len(versions), tc.maxWrites)
				}
				if got := times(); len(got) > tc.maxWrites || got[0] != tc.firstAt {
					t.Errorf("patches sent at %v, want at most %d, the first at %s", got, tc.maxWrites, tc.firstAt)
				}
			})
		})
	}
}

// TestConfirmAskedWhileAWriteIsOnItsWay: a write whose list was computed before
// the caller took its volume out cannot confirm that; the caller gets the next
// write, which covers it.
func TestConfirmAskedWhileAWriteIsOnItsWay(t *testing.T) {
	both := managedNode("1")
	h := newHarness(t, both, both.DeepCopy())
	h.attach(volA, true)
	h.attach(volB, true)
	blocked, release := h.holdFirstPatch()
	h.updater.Enqueue(nodeName)
	<-blocked
	h.actual.HideForDetach(volB, nodeName, cache.NotForced)
	answer := make(chan *v1.Node, 1)
	go func() {
		n, err := h.updater.Confirm(context.Background(), nodeName)
		if err != nil {
			t.Error(err)
		}
		answer <- n
	}()
	for h.updater.Waiting(nodeName) == 0 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	got := <-answer
	if slices.ContainsFunc(got.Status.VolumesAttached, func(av v1.AttachedVolume) bool { return av.Name == v1.UniqueVolumeName(volB) }) {
		t.Errorf("confirmed node lists %v, want %s out", got.Status.VolumesAttached, volB)
	}
	if n := len(h.patches(t)); n != 2 {
		t.Errorf("%d patches, want 2: the one on its way, and one for the confirmation", n)
	}
}

// TestConfirmWithoutAnAnswer: a failed write fails every confirmation it
// covered; a caller that gives up, or an updater that stops, leaves nothing
// waiting.
func TestConfirmWithoutAnAnswer(t *testing.T) {
	t.Run("the write fails", func(t *testing.T) {
		h := newHarness(t, managedNode("1", csiEntry(volA)), managedNode("1", csiEntry(volA)))
		h.attach(volA, true)
		h.client.PrependReactor("patch", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("etcd unavailable")
		})
		h.actual.HideForDetach(volA, nodeName, cache.NotForced)
		if _, err := h.updater.Confirm(context.Background(), nodeName); err == nil {
			t.Error("Confirm = nil error, want the patch's")
		}
	})
	t.Run("the caller gives up", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHarnessWithBacklog(t, fixedBacklog(time.Minute), 0, managedNode("1", csiEntry(volA)), managedNode("1", csiEntry(volA)))
			h.attach(volA, true)
			h.actual.HideForDetach(volA, nodeName, cache.NotForced)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if _, err := h.updater.Confirm(ctx, nodeName); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Confirm = %v, want the context's error", err)
			}
			if n := h.updater.Waiting(nodeName); n != 0 {
				t.Errorf("%d confirmations still waiting, want 0", n)
			}
		})
	})
	t.Run("the updater stops", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHarnessWithBacklog(t, fixedBacklog(time.Minute), 0, managedNode("1", csiEntry(volA)), managedNode("1", csiEntry(volA)))
			h.attach(volA, true)
			h.actual.HideForDetach(volA, nodeName, cache.NotForced)
			go func() {
				time.Sleep(time.Second)
				h.updater.ShutDown()
			}()
			if _, err := h.updater.Confirm(context.Background(), nodeName); !errors.Is(err, statusupdater.ErrStopped) {
				t.Errorf("Confirm = %v, want ErrStopped", err)
			}
			if n := len(h.patches(t)); n != 0 {
				t.Errorf("%d patches after the updater stopped, want none", n)
			}
		})
	})
}

// TestACallerGivingUpLeavesTheOthersWaiting: one caller of Confirm that stops
// waiting takes back its own confirmation only; another still waits, and the
// next write answers it.
func TestACallerGivingUpLeavesTheOthersWaiting(t *testing.T) {
	h := newHarness(t, managedNode("1"), managedNode("1"))
	h.attach(volA, true)
	blocked, release := h.holdFirstPatch()
	h.updater.Enqueue(nodeName)
	<-blocked
	ctx, giveUp := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := h.updater.Confirm(ctx, nodeName)
		gaveUp <- err
	}()
	answered := make(chan error, 1)
	go func() {
		_, err := h.updater.Confirm(context.Background(), nodeName)
		answered <- err
	}()
	for h.updater.Waiting(nodeName) < 2 {
		time.Sleep(time.Millisecond)
	}
	giveUp()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Errorf("Confirm of the caller that gave up = %v, want context.Canceled", err)
	}
	if n := h.updater.Waiting(nodeName); n != 1 {
		t.Errorf("%d confirmations waiting after one caller gave up, want the other one", n)
	}
	close(release)
	select {
	case err := <-answered:
		if err != nil {
			t.Errorf("Confirm of the caller that waited = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the caller that waited had no answer 10 s after the write went on")
	}
}

// TestConfirmWritesAgainWhenItsPatchMetAnotherList: a patch answered with a list
// other than the one written (another writer got in between) confirms nothing:
// the updater reads the node and writes again.
func TestConfirmWritesAgainWhenItsPatchMetAnotherList(t *testing.T) {
	h := newHarness(t, managedNode("1"), managedNode("1"))
	h.attach(volA, true)
	var once sync.Once
	h.client.PrependReactor("patch", "nodes", func(clienttesting.Action) (handled bool, _ runtime.Object, _ error) {
		var other runtime.Object
		once.Do(func() {
			handled, other = true, managedNode("2", csiEntry(volB))
		})
		return handled, other, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := h.updater.Confirm(ctx, nodeName)
	if err != nil {
		t.Fatal(err)
	}
	if want := []v1.AttachedVolume{csiEntry(volA)}; !slices.Equal(got.Status.VolumesAttached, want) {
		t.Errorf("confirmed node lists %v, want %v", got.Status.VolumesAttached, want)
	}
}

// holdFirstPatch holds the updater's first node patch until release is closed;
// blocked is closed once that patch is on its way.
func (h *harness) holdFirstPatch() (blocked, release chan struct{}) {
	blocked, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	h.client.PrependReactor("patch", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
		once.Do(func() {
			close(blocked)
			<-release
		})
		return false, nil, nil
	})
	return blocked, release
}
