package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/watchrecord"
)

// delivered records, per object, the resourceVersion an informer's event
// handler has finished with. A standby registers its handlers long before it
// leads (Prepare); once it leads and the start-up check has proven an informer
// current, the state is current only when the handler has been given every
// change the informer's cache held then (caughtUp). An informer applies a change
// to its cache before it tells its handlers, so a proven cache alone is not a
// proven state.
type delivered struct {
	store toolscache.Store

	mu       sync.Mutex
	versions map[string]string
}

func newDelivered(store toolscache.Store) *delivered {
	return &delivered{store: store, versions: make(map[string]string)}
}

// handler calls h, then records what h was given.
func (d *delivered) handler(h toolscache.ResourceEventHandler) toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			h.OnAdd(obj, initial)
			d.record(obj)
		},
		UpdateFunc: func(oldObj, obj any) {
			h.OnUpdate(oldObj, obj)
			d.record(obj)
		},
		DeleteFunc: func(obj any) {
			h.OnDelete(obj)
			if key := objectKey(obj); key != "" {
				d.mu.Lock()
				delete(d.versions, key)
				d.mu.Unlock()
			}
		},
	}
}

func (d *delivered) record(obj any) {
	o, err := meta.Accessor(obj)
	key := objectKey(obj)
	if err != nil || key == "" {
		return
	}
	d.mu.Lock()
	d.versions[key] = o.GetResourceVersion()
	d.mu.Unlock()
}

// caughtUp waits until the handler has finished with every object the cache
// holds now, at that version or a later one, or the cache no longer holds that
// key: the object's deletion reaches the handler after that version.
func (d *delivered) caughtUp(ctx context.Context) error {
	type version struct{ key, want string }
	var held []version
	for _, key := range d.store.ListKeys() {
		if obj, exists, err := d.store.GetByKey(key); err == nil && exists {
			if o, err := meta.Accessor(obj); err == nil {
				held = append(held, version{key, o.GetResourceVersion()})
			}
		}
	}
	err := wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(context.Context) (bool, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		held = slices.DeleteFunc(held, func(v version) bool {
			if have, ok := d.versions[v.key]; ok && (have == v.want || watchrecord.AtLeastVersion(have, v.want)) {
				return true
			}
			_, exists, err := d.store.GetByKey(v.key)
			return err == nil && !exists
		})
		return len(held) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%d objects not yet given to the event handler: %w", len(held), err)
	}
	return nil
}
