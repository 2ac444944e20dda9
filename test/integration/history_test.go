package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/attachments"
)

// history records, from its start on, every change the API server shows of the
// VolumeAttachments and of the nodes' status.volumesAttached: each event of a
// watch that resumes where it stopped, so that no change is missed.
type history struct {
	t      testing.TB
	client kubernetes.Interface
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu sync.Mutex
	// uids are the UIDs each VolumeAttachment name had, in order.
	uids map[string][]types.UID
	// current is the UID of each VolumeAttachment that exists.
	current map[string]types.UID
	// deleted are the names of the VolumeAttachments deleted, in order.
	deleted []string
	// attached is each node's status.volumesAttached as last seen.
	attached map[string]map[corev1.UniqueVolumeName]bool
	// removed are the node/volume pairs taken out of volumesAttached.
	removed map[string]bool
	// readded are the node/volume pairs put back into volumesAttached after removal.
	readded []string
}

// recordHistory lists VolumeAttachments and nodes and records their changes until
// the test ends.
func recordHistory(t testing.TB, client kubernetes.Interface) *history {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &history{
		t: t, client: client, cancel: cancel,
		uids:     map[string][]types.UID{},
		current:  map[string]types.UID{},
		attached: map[string]map[corev1.UniqueVolumeName]bool{},
		removed:  map[string]bool{},
	}
	t.Cleanup(h.stop)
	vas, err := client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range vas.Items {
		h.attachment(watch.Added, &vas.Items[i])
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range nodes.Items {
		h.node(&nodes.Items[i])
	}
	h.watch(ctx, vas.ResourceVersion, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return client.StorageV1().VolumeAttachments().Watch(ctx, o)
	}, func(ev watch.Event) {
		if va, ok := ev.Object.(*storagev1.VolumeAttachment); ok {
			h.attachment(ev.Type, va)
		}
	})
	h.watch(ctx, nodes.ResourceVersion, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return client.CoreV1().Nodes().Watch(ctx, o)
	}, func(ev watch.Event) {
		if n, ok := ev.Object.(*corev1.Node); ok && ev.Type != watch.Deleted {
			h.node(n)
		}
	})
	return h
}

func (h *history) watch(ctx context.Context, rv string, watchFunc cache.WatchFuncWithContext, record func(watch.Event)) {
	w, err := watchtools.NewRetryWatcherWithContext(ctx, rv, &cache.ListWatch{WatchFuncWithContext: watchFunc})
	if err != nil {
		h.t.Fatal(err)
	}
	h.wg.Go(func() {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				if ev.Type == watch.Error {
					h.t.Errorf("recording history: watch error %v", ev.Object)
					continue
				}
				record(ev)
			}
		}
	})
}

func (h *history) stop() {
	h.cancel()
	h.wg.Wait()
}

func (h *history) attachment(typ watch.EventType, va *storagev1.VolumeAttachment) {
	if va.Name == attachments.CacheProbe {
		// The record of no attachment: a new leader's proof of its cache.
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if typ == watch.Deleted {
		delete(h.current, va.Name)
		h.deleted = append(h.deleted, va.Name)
		return
	}
	if uids := h.uids[va.Name]; len(uids) == 0 || uids[len(uids)-1] != va.UID {
		h.uids[va.Name] = append(uids, va.UID)
	}
	h.current[va.Name] = va.UID
}

func (h *history) node(n *corev1.Node) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := map[corev1.UniqueVolumeName]bool{}
	for _, av := range n.Status.VolumesAttached {
		now[av.Name] = true
	}
	before := h.attached[n.Name]
	for v := range before {
		if !now[v] {
			h.removed[n.Name+"/"+string(v)] = true
		}
	}
	for v := range now {
		if key := n.Name + "/" + string(v); !before[v] && h.removed[key] {
			h.readded = append(h.readded, key)
		}
	}
	h.attached[n.Name] = now
}

// waitCaughtUp waits until the history shows the VolumeAttachments and the nodes'
// volumesAttached as the API server has them now.
func (h *history) waitCaughtUp() {
	h.t.Helper()
	suite.EventuallySucceeds(h.t, suite.WaitTimeout, "the recorded history to catch up", func() error {
		ctx := context.Background()
		vas, err := h.client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		nodes, err := h.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		want := map[string]types.UID{}
		for _, va := range vas.Items {
			if va.Name != attachments.CacheProbe {
				want[va.Name] = va.UID
			}
		}
		if !maps.Equal(want, h.current) {
			return fmt.Errorf("VolumeAttachments %v, recorded %v", want, h.current)
		}
		for _, n := range nodes.Items {
			var now []corev1.UniqueVolumeName
			for _, av := range n.Status.VolumesAttached {
				now = append(now, av.Name)
			}
			if recorded := slices.Collect(maps.Keys(h.attached[n.Name])); !sameVolumes(now, recorded) {
				return fmt.Errorf("node %s volumesAttached %v, recorded %v", n.Name, now, recorded)
			}
		}
		return nil
	})
}

func sameVolumes(a, b []corev1.UniqueVolumeName) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// check fails the test if a VolumeAttachment name ever had two UIDs (deleted and
// created again), if a node's volumesAttached ever got back a volume it had dropped,
// or if the VolumeAttachments deleted are not exactly wantDeleted.
func (h *history) check(wantDeleted ...string) {
	h.t.Helper()
	h.waitCaughtUp()
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, uids := range h.uids {
		if len(uids) > 1 {
			h.t.Errorf("VolumeAttachment %s was recreated: UIDs %v", name, uids)
		}
	}
	if !slices.Equal(slices.Sorted(slices.Values(h.deleted)), slices.Sorted(slices.Values(wantDeleted))) {
		h.t.Errorf("VolumeAttachments deleted: %v, want exactly %v", h.deleted, wantDeleted)
	}
	for _, key := range h.readded {
		h.t.Errorf("node status volumesAttached entry %s was removed and added again", key)
	}
}

// wasRemoved tells whether node status ever dropped the volume from the node.
func (h *history) wasRemoved(node string, volume string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.removed[node+"/"+volume]
}
