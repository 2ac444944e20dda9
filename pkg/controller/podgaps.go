package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
)

// The wait for unmount counts the time a volume has been needed by no pod on a
// node, as the pod informer shows the pods. The informer misses pods only when
// it lists again: a pod created and gone since its last event shows in neither
// its watch nor its new list. It lists again after a failed list, a failed
// watch, or a watch that ended with an error (410 Gone, an etcd error); when it
// watches again instead (after 429 or an internal error), it resumes from where
// it was and misses nothing. So:
//
//   - a gap opens at each failure, and no wait for unmount ends while one is open;
//   - a list (its last page, or a watch that sends the initial objects) ends the
//     gap, and a wait counts from no earlier than that list, since the pods it
//     missed may have needed the volume;
//   - a watch that resumes ends the gap and moves nothing.
//
// A watch that closes without an error (the API server's timeout every 5 to 10
// minutes) opens no gap: the informer watches again from where it was, and a
// failure of that watch opens one.

// podGaps records the gaps in what the pod informer shows.
type podGaps struct {
	mu     sync.Mutex
	open   bool
	listed time.Time
	now    func() time.Time
	// onEnd is told, with mu not held, when a gap ends: waits for unmount held
	// by it may be judged again.
	onEnd func()
}

func newPodGaps(now func() time.Time) *podGaps { return &podGaps{now: now} }

// failed records a failed list or watch, or a watch that ended with an error.
func (g *podGaps) failed() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = true
}

// relisted records a complete list: the pods shown from now on, less any that
// came and went before it.
func (g *podGaps) relisted() {
	g.end(true)
}

// resumed records a watch started from where the informer was.
func (g *podGaps) resumed() {
	g.end(false)
}

func (g *podGaps) end(relisted bool) {
	g.mu.Lock()
	ended := g.open
	g.open = false
	if relisted {
		g.listed = g.now()
	}
	onEnd := g.onEnd
	g.mu.Unlock()
	if ended && onEnd != nil {
		onEnd()
	}
}

// follow makes onEnd be told of the end of every gap from now on.
func (g *podGaps) follow(onEnd func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.onEnd = onEnd
}

// WatchingSince returns when the informer last listed (zero: not yet), and
// false while a gap is open.
func (g *podGaps) WatchingSince() (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.listed, !g.open
}

// recordedPodInformer is the pod informer with the record of its gaps.
type recordedPodInformer struct {
	toolscache.SharedIndexInformer
	gaps *podGaps
}

// podInformer returns the factory's pod informer, made with a record of its gaps
// unless the factory made it already.
func podInformer(f informers.SharedInformerFactory) (*recordedPodInformer, error) {
	inf := f.InformerFor(&v1.Pod{}, newRecordedPodInformer)
	recorded, ok := inf.(*recordedPodInformer)
	if !ok {
		return nil, fmt.Errorf("the factory's pod informer was made before the controller's: its gaps cannot be followed")
	}
	return recorded, nil
}

func newRecordedPodInformer(client kubernetes.Interface, resync time.Duration) toolscache.SharedIndexInformer {
	gaps := newPodGaps(time.Now)
	pods := client.CoreV1().Pods(metav1.NamespaceAll)
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list, err := pods.List(ctx, opts)
			switch {
			case err != nil:
				gaps.failed()
			case lastPage(list):
				gaps.relisted()
			}
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w, err := pods.Watch(ctx, opts)
			switch {
			case err != nil:
				gaps.failed()
				return nil, err
			case opts.SendInitialEvents != nil && *opts.SendInitialEvents:
				gaps.relisted()
			default:
				gaps.resumed()
			}
			return newRecordedWatch(w, func(errored bool) {
				if errored && ctx.Err() == nil {
					gaps.failed()
				}
			}), nil
		},
	}
	inf := toolscache.NewSharedIndexInformer(toolscache.ToListWatcherWithWatchListSemantics(lw, client), &v1.Pod{}, resync,
		toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	return &recordedPodInformer{SharedIndexInformer: inf, gaps: gaps}
}

// judgeWaitsAgain queues every attached volume when a gap in what the pod
// informer shows ends: the waits for unmount it held may be over.
func (c *Controller) judgeWaitsAgain() {
	for _, v := range c.actual.Volumes() {
		c.reconciler.Enqueue(v)
	}
}
