package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// An informer whose list fails has stopped watching: until a list succeeds, it
// shows nothing that happens, and another tool's VolumeAttachment made meanwhile
// holds a single-attach volume where the controller does not know it. Such a
// list failure makes the actual state incomplete, and no single-attach attach
// starts until the state is proven complete again:
//
//  1. a list of the informer has succeeded since its last failure, so that its
//     watch runs again and shows what is created from then on;
//  2. a quorum list of VolumeAttachments, taken after that, names only objects
//     that the actual state records (what the event handlers have processed,
//     not what the informer's cache holds) or that a later quorum list no longer
//     names (deleted since).
//
// A list that fails during the proof starts it again. Multi-attach volumes and
// detaches do not wait: they cannot put a single-attach volume on two nodes.

// incompleteReason is why single-attach attaches wait while the proof runs.
const incompleteReason = "the VolumeAttachment informer could not list; a single-attach volume is attached nowhere new until every VolumeAttachment that exists is known"

// listRecord counts the failed lists of the VolumeAttachment informer and tells
// whether a complete list succeeded since the last failure.
type listRecord struct {
	mu       sync.Mutex
	failures uint64
	listed   bool
	// changed is closed, and replaced, at every failure and success.
	changed chan struct{}
	// onFailure is told of each failure while mu is held.
	onFailure func()
}

func newListRecord() *listRecord {
	return &listRecord{listed: true, changed: make(chan struct{})}
}

// observe records the outcome of one list request of the informer: a failure, or
// the last page of a list.
func (r *listRecord) observe(list runtime.Object, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err != nil:
		r.failures++
		r.listed = false
		if r.onFailure != nil {
			r.onFailure()
		}
	case !r.listed && lastPage(list):
		r.listed = true
	default:
		return
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

func lastPage(list runtime.Object) bool {
	l, err := meta.ListAccessor(list)
	return err == nil && l.GetContinue() == ""
}

// state returns the failures so far, whether a list succeeded since the last,
// and a channel closed at the next change.
func (r *listRecord) state() (failures uint64, listed bool, changed <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failures, r.listed, r.changed
}

// follow makes onFailure be told of every failure from now on, and at once if
// one happened since proven.
func (r *listRecord) follow(proven uint64, onFailure func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onFailure = onFailure
	if r.failures != proven {
		onFailure()
	}
}

// ifNoFailureSince runs fn, unless a list failed after the failures counted.
func (r *listRecord) ifNoFailureSince(failures uint64, fn func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failures != failures {
		return false
	}
	fn()
	return true
}

// recordedInformer is the VolumeAttachment informer with the record of its lists.
type recordedInformer struct {
	toolscache.SharedIndexInformer
	lists *listRecord
}

// attachmentInformer returns the factory's VolumeAttachment informer, made with a
// record of its lists unless the factory made it already.
func attachmentInformer(f informers.SharedInformerFactory) (*recordedInformer, error) {
	inf := f.InformerFor(&storagev1.VolumeAttachment{}, newRecordedInformer)
	recorded, ok := inf.(*recordedInformer)
	if !ok {
		return nil, fmt.Errorf("the factory's VolumeAttachment informer was made before the controller's: its failed lists cannot be followed")
	}
	return recorded, nil
}

func newRecordedInformer(client kubernetes.Interface, resync time.Duration) toolscache.SharedIndexInformer {
	lists := newListRecord()
	vas := client.StorageV1().VolumeAttachments()
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list, err := vas.List(ctx, opts)
			lists.observe(list, err)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return vas.Watch(ctx, opts)
		},
	}
	inf := toolscache.NewSharedIndexInformer(toolscache.ToListWatcherWithWatchListSemantics(lw, client), &storagev1.VolumeAttachment{}, resync,
		toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	return &recordedInformer{SharedIndexInformer: inf, lists: lists}
}

// proveAttachments keeps the actual state marked incomplete from each failed list
// of the VolumeAttachment informer until it is proven complete again, and then
// re-queues every volume a pod needs, since their attaches waited.
func (c *Controller) proveAttachments(ctx context.Context) {
	logger := klog.FromContext(ctx)
	proven := uint64(0)
	for ctx.Err() == nil {
		failures, listed, changed := c.attachmentLists.state()
		switch {
		case failures == proven:
		case !listed:
			logger.V(2).Info("VolumeAttachment informer cannot list; single-attach attaches wait", "failedLists", failures)
		default:
			complete, err := c.attachmentsKnown(ctx, failures)
			if err != nil {
				logger.Error(err, "Proving that every VolumeAttachment is known; retrying")
				if !sleep(ctx, time.Second) {
					return
				}
				continue
			}
			if complete && c.attachmentLists.ifNoFailureSince(failures, func() { c.actual.SetIncomplete("") }) {
				proven = failures
				logger.Info("Every VolumeAttachment is known again; single-attach attaches resume", "failedLists", failures)
				for _, v := range c.desired.Volumes() {
					c.reconciler.Enqueue(v)
				}
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// markIncomplete is told of each failed list of the VolumeAttachment informer.
func (c *Controller) markIncomplete(ctx context.Context) func() {
	return func() {
		if c.actual.Incomplete() == "" {
			klog.FromContext(ctx).Info("VolumeAttachment informer failed to list; single-attach attaches wait until every VolumeAttachment is known again")
		}
		c.actual.SetIncomplete(incompleteReason)
	}
}

// attachmentsKnown takes a quorum list of VolumeAttachments and waits until the
// actual state records each listed object, or a later quorum list no longer names
// it. It returns false, with no error, when a list of the informer failed after
// failures, or ctx ended.
func (c *Controller) attachmentsKnown(ctx context.Context, failures uint64) (bool, error) {
	logger := klog.FromContext(ctx)
	pending, err := c.listAttachments(ctx)
	if err != nil {
		return false, err
	}
	for {
		recorded := c.actual.ObjectNames()
		for name, uid := range pending {
			if have, ok := recorded[name]; ok && (have == uid || have == "") {
				delete(pending, name)
			}
		}
		if len(pending) == 0 {
			return true, nil
		}
		logger.V(2).Info("Waiting for the VolumeAttachment informer to show what exists", "missing", len(pending))
		if !sleep(ctx, 200*time.Millisecond) {
			return false, nil
		}
		if now, _, _ := c.attachmentLists.state(); now != failures {
			return false, nil
		}
		existing, err := c.listAttachments(ctx)
		if err != nil {
			return false, err
		}
		for name, uid := range pending {
			if existing[name] != uid {
				delete(pending, name)
			}
		}
	}
}

// listAttachments returns the name and UID of every VolumeAttachment, read from
// etcd.
func (c *Controller) listAttachments(ctx context.Context) (map[string]types.UID, error) {
	out := make(map[string]types.UID)
	err := quorumList(ctx, func(ctx context.Context, opts metav1.ListOptions) ([]storagev1.VolumeAttachment, string, error) {
		list, err := c.client.StorageV1().VolumeAttachments().List(ctx, opts)
		if err != nil {
			return nil, "", err
		}
		return list.Items, list.Continue, nil
	}, func(va *storagev1.VolumeAttachment) {
		out[va.Name] = va.UID
	})
	if err != nil {
		return nil, fmt.Errorf("listing VolumeAttachments: %w", err)
	}
	return out, nil
}

// sleep waits for d, and reports false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
