package controller

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// TestCacheAtPresentOrList: a cache that has applied every change up to the
// present proves its informer current without waiting for the quorum list of
// every object, which is called off; otherwise the list decides. A standby's
// start-up check and the proof after each lapse of the VolumeAttachment
// informer waited for a second list of every object (10,000 pods at start-up).
func TestCacheAtPresentOrList(t *testing.T) {
	tests := []struct {
		name string
		// cached is the version of the last change the cache applied.
		cached     string
		present    string
		presentErr error
		// listFails: the list fails at once instead of answering in a second.
		listFails   bool
		wantPresent bool
	}{
		{name: "the cache applied a later change", cached: "12", present: "10", wantPresent: true},
		{name: "the cache applied that very change", cached: "10", present: "10", wantPresent: true},
		{name: "the cache is behind", cached: "9", present: "10"},
		{name: "the cache keeps no version", cached: "", present: "10"},
		{name: "the present cannot be read", cached: "12", presentErr: errors.New("etcdserver: request timed out")},
		{name: "the list fails, the cache gets there", cached: "12", present: "10", listFails: true, wantPresent: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &Controller{presentWait: 200 * time.Millisecond}
			cache := &toolscache.FakeCustomStore{LastStoreSyncResourceVersionFunc: func() string { return tc.cached }}
			present := func(context.Context) (string, error) { return tc.present, tc.presentErr }
			calledOff := make(chan struct{})
			// The list answers only once the cache has had its chance, or when
			// it is called off.
			list := func(ctx context.Context) (int, error) {
				if tc.listFails {
					close(calledOff)
					return 0, errors.New("etcdserver: request timed out")
				}
				select {
				case <-ctx.Done():
					close(calledOff)
					return 0, ctx.Err()
				case <-time.After(time.Second):
					return 7, nil
				}
			}
			at, listed, err := cacheAtPresentOrList(t.Context(), c, present, cache, list, 0)
			if at != tc.wantPresent {
				t.Fatalf("at the present: %t, want %t", at, tc.wantPresent)
			}
			if tc.wantPresent {
				select {
				case <-calledOff:
				case <-time.After(5 * time.Second):
					t.Error("the list was not called off")
				}
				return
			}
			if listed != 7 || err != nil {
				t.Errorf("list's answer = %d, %v, want 7, nil", listed, err)
			}
		})
	}
}

// TestCacheAtPresentOrListAfterAHeadStart: given a head start, a cache that
// reaches the present within it proves its informer current with no list sent;
// one that does not is proven by the list, sent after the head start, or as soon
// as the wait for the cache gives up (the present could not be read, or the
// cache did not reach it within presentWait).
func TestCacheAtPresentOrListAfterAHeadStart(t *testing.T) {
	tests := []struct {
		name        string
		cached      string
		presentErr  error
		presentWait time.Duration
		wantPresent bool
		wantLists   int32
		// wantListAt is when the list was sent, from the start.
		wantListAt time.Duration
	}{
		{name: "the cache gets there first", cached: "12", presentWait: 200 * time.Millisecond, wantPresent: true, wantLists: 0},
		{name: "the cache is behind", cached: "9", presentWait: 5 * time.Second, wantLists: 1, wantListAt: time.Second},
		{name: "the cache gives up before the head start ends", cached: "9", presentWait: 200 * time.Millisecond, wantLists: 1, wantListAt: 200 * time.Millisecond},
		{name: "the present cannot be read", cached: "12", presentErr: errors.New("admission webhook denied the request"), presentWait: 5 * time.Second, wantLists: 1, wantListAt: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := &Controller{presentWait: tc.presentWait}
				cache := &toolscache.FakeCustomStore{LastStoreSyncResourceVersionFunc: func() string { return tc.cached }}
				present := func(context.Context) (string, error) { return "10", tc.presentErr }
				var lists atomic.Int32
				start := time.Now()
				var listAt time.Duration
				list := func(context.Context) (int, error) {
					lists.Add(1)
					listAt = time.Since(start)
					return 7, nil
				}
				at, listed, err := cacheAtPresentOrList(t.Context(), c, present, cache, list, time.Second)
				synctest.Wait()
				if at != tc.wantPresent || lists.Load() != tc.wantLists {
					t.Fatalf("at the present: %t after %d lists, want %t after %d", at, lists.Load(), tc.wantPresent, tc.wantLists)
				}
				if tc.wantLists > 0 && listAt != tc.wantListAt {
					t.Errorf("the list was sent %s after the start, want %s", listAt, tc.wantListAt)
				}
				if !at && (listed != 7 || err != nil) {
					t.Errorf("list's answer = %d, %v, want 7, nil", listed, err)
				}
			})
		})
	}
}

// TestQuorumListReadsEveryPage: a quorum list asks for pages of metadataPageSize
// and follows each continue token to the last page, so that it names every
// object.
func TestQuorumListReadsEveryPage(t *testing.T) {
	total := 2*metadataPageSize + 7
	var asked []metav1.ListOptions
	list := func(_ context.Context, opts metav1.ListOptions) ([]int, string, error) {
		asked = append(asked, opts)
		from := 0
		if opts.Continue != "" {
			from, _ = strconv.Atoi(opts.Continue)
		}
		to := min(from+int(opts.Limit), total)
		page := make([]int, 0, to-from)
		for i := from; i < to; i++ {
			page = append(page, i)
		}
		next := ""
		if to < total {
			next = strconv.Itoa(to)
		}
		return page, next, nil
	}
	seen := 0
	if err := quorumList(t.Context(), list, func(*int) { seen++ }); err != nil {
		t.Fatal(err)
	}
	if seen != total || len(asked) != 3 {
		t.Fatalf("handed %d objects in %d pages, want %d in 3", seen, len(asked), total)
	}
	for _, opts := range asked {
		if opts.Limit != metadataPageSize || opts.ResourceVersion != "" {
			t.Errorf("a page was asked with limit %d and resourceVersion %q, want %d and the quorum's \"\"", opts.Limit, opts.ResourceVersion, metadataPageSize)
		}
	}
}
