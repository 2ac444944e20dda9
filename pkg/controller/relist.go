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
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// An informer that is not watching shows nothing that happens: once its watch
// ends with an error (410 Gone: the API server's window moved past it) or closes,
// it lists again, after a back-off that grows to 30 s, and a list that fails
// leaves it blind for longer. Another tool's VolumeAttachment made meanwhile
// holds a single-attach volume where the controller does not know it. So each
// end of a watch, failed start of one and failed list makes the actual state
// incomplete, and no single-attach attach starts until it is proven complete
// again:
//
//  1. since the last of those, a list has succeeded or a watch has started, so
//     that the informer shows what happens from then on;
//  2. a quorum list of VolumeAttachments, taken after that, names only objects
//     that the actual state records (what the event handlers have processed,
//     not only what the informer's cache holds) or that a later quorum list no
//     longer names (deleted since).
//
// An end or failure during the proof starts it again. Multi-attach volumes,
// in-tree iSCSI and Fibre Channel volumes (which have no VolumeAttachment) and
// detaches do not wait. A watch the API server closes at its timeout (every 5 to
// 10 minutes) costs one quorum list, and the single-attach attaches of that
// moment wait for it.

// incompleteReason is why single-attach attaches wait while the proof runs.
const incompleteReason = "the VolumeAttachment informer stopped watching; a single-attach volume is attached nowhere new until every VolumeAttachment that exists is known"

// watchRecord counts the times the VolumeAttachment informer stopped watching
// (lapses), and tells whether it has resumed since the last.
type watchRecord struct {
	mu      sync.Mutex
	lapses  uint64
	resumed bool
	// watches counts the watches started; only the latest one's end is a lapse.
	watches uint64
	// changed is closed, and replaced, at every lapse and resumption.
	changed chan struct{}
	// onLapse is told of each lapse while mu is held.
	onLapse func()
}

func newWatchRecord() *watchRecord {
	return &watchRecord{resumed: true, changed: make(chan struct{})}
}

func (r *watchRecord) lapsedLocked() {
	r.lapses++
	r.resumed = false
	if r.onLapse != nil {
		r.onLapse()
	}
	r.changedLocked()
}

func (r *watchRecord) resumedLocked() {
	if !r.resumed {
		r.resumed = true
		r.changedLocked()
	}
}

func (r *watchRecord) changedLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// listed records the outcome of one list request of the informer: a failure, or
// the last page of a list.
func (r *watchRecord) listed(list runtime.Object, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err != nil:
		r.lapsedLocked()
	case lastPage(list):
		r.resumedLocked()
	}
}

func lastPage(list runtime.Object) bool {
	l, err := meta.ListAccessor(list)
	return err == nil && l.GetContinue() == ""
}

// watchStarted records the outcome of a watch request and returns the watch's
// number, for watchEnded.
func (r *watchRecord) watchStarted(err error) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.lapsedLocked()
		return 0
	}
	r.watches++
	r.resumedLocked()
	return r.watches
}

// watchEnded records that watch n ended; it is a lapse if no later watch started.
func (r *watchRecord) watchEnded(n uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n == r.watches {
		r.lapsedLocked()
	}
}

// state returns the lapses so far, whether the informer resumed since the last,
// and a channel closed at the next change.
func (r *watchRecord) state() (lapses uint64, resumed bool, changed <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lapses, r.resumed, r.changed
}

// follow makes onLapse be told of every lapse from now on, and at once if the
// informer lapsed more often than the proven lapses count.
func (r *watchRecord) follow(proven uint64, onLapse func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onLapse = onLapse
	if r.lapses != proven {
		onLapse()
	}
}

// ifNoLapseSince runs fn, unless the informer lapsed after the lapses counted.
func (r *watchRecord) ifNoLapseSince(lapses uint64, fn func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lapses != lapses {
		return false
	}
	fn()
	return true
}

// recordedWatch passes a watch's events on and tells its record when it ends:
// at an error event (errored), or when its channel closes, whichever comes first.
type recordedWatch struct {
	inner  watch.Interface
	events chan watch.Event
	stop   chan struct{}
	once   sync.Once
}

func newRecordedWatch(inner watch.Interface, ended func(errored bool)) *recordedWatch {
	w := &recordedWatch{inner: inner, events: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(w.events)
		var endOnce sync.Once
		defer endOnce.Do(func() { ended(false) })
		for ev := range inner.ResultChan() {
			if ev.Type == watch.Error {
				endOnce.Do(func() { ended(true) })
			}
			select {
			case w.events <- ev:
			case <-w.stop:
				return
			}
		}
	}()
	return w
}

func (w *recordedWatch) ResultChan() <-chan watch.Event { return w.events }

func (w *recordedWatch) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.inner.Stop()
	})
}

// recordedInformer is the VolumeAttachment informer with the record of its
// watches.
type recordedInformer struct {
	toolscache.SharedIndexInformer
	watches *watchRecord
}

// attachmentInformer returns the factory's VolumeAttachment informer, made with a
// record of its watches unless the factory made it already.
func attachmentInformer(f informers.SharedInformerFactory) (*recordedInformer, error) {
	inf := f.InformerFor(&storagev1.VolumeAttachment{}, newRecordedInformer)
	recorded, ok := inf.(*recordedInformer)
	if !ok {
		return nil, fmt.Errorf("the factory's VolumeAttachment informer was made before the controller's: its watches cannot be followed")
	}
	return recorded, nil
}

func newRecordedInformer(client kubernetes.Interface, resync time.Duration) toolscache.SharedIndexInformer {
	record := newWatchRecord()
	vas := client.StorageV1().VolumeAttachments()
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list, err := vas.List(ctx, opts)
			record.listed(list, err)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w, err := vas.Watch(ctx, opts)
			n := record.watchStarted(err)
			if err != nil {
				return nil, err
			}
			// An end at shutdown is no lapse: nothing decides any more.
			return newRecordedWatch(w, func(bool) {
				if ctx.Err() == nil {
					record.watchEnded(n)
				}
			}), nil
		},
	}
	inf := toolscache.NewSharedIndexInformer(toolscache.ToListWatcherWithWatchListSemantics(lw, client), &storagev1.VolumeAttachment{}, resync,
		toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	return &recordedInformer{SharedIndexInformer: inf, watches: record}
}

// proveAttachments keeps the actual state marked incomplete from each lapse of
// the VolumeAttachment informer until it is proven complete again, and then
// re-queues every volume a pod needs, since their attaches waited.
func (c *Controller) proveAttachments(ctx context.Context) {
	logger := klog.FromContext(ctx)
	proven := uint64(0)
	for ctx.Err() == nil {
		lapses, resumed, changed := c.attachmentWatches.state()
		switch {
		case lapses == proven:
		case !resumed:
			logger.V(2).Info("VolumeAttachment informer is not watching; single-attach attaches wait", "lapses", lapses)
		default:
			complete, err := c.attachmentsKnown(ctx, lapses)
			if err != nil {
				logger.Error(err, "Proving that every VolumeAttachment is known; retrying")
				if !sleep(ctx, time.Second) {
					return
				}
				continue
			}
			if complete && c.attachmentWatches.ifNoLapseSince(lapses, func() { c.actual.SetIncomplete("") }) {
				proven = lapses
				logger.Info("Every VolumeAttachment is known again; single-attach attaches resume", "lapses", lapses)
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

// markIncomplete is told of each lapse of the VolumeAttachment informer.
func (c *Controller) markIncomplete(ctx context.Context) func() {
	return func() {
		if c.actual.Incomplete() == "" {
			klog.FromContext(ctx).Info("VolumeAttachment informer stopped watching; single-attach attaches wait until every VolumeAttachment is known again")
		}
		c.actual.SetIncomplete(incompleteReason)
	}
}

// attachmentsKnown takes a quorum list of VolumeAttachments and waits until the
// actual state records each listed object, or a later quorum list no longer names
// it. It returns false, with no error, when the informer lapsed again after
// lapses, or ctx ended.
func (c *Controller) attachmentsKnown(ctx context.Context, lapses uint64) (bool, error) {
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
		if now, _, _ := c.attachmentWatches.state(); now != lapses {
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
