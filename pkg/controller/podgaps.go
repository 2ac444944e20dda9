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
// node, and the pods are what the pod informer shows. A pod informer whose watch
// failed (410 Gone, an error) and whose list has not yet succeeded shows nothing
// that happens: pods created on the node in that gap, and gone before it ends,
// were never seen although they needed the volume. So a wait counts only from
// the end of the last gap, and no wait ends while a gap is open. A watch that
// closes without an error (the API server's timeout) is no gap: the informer
// watches again from where it was.

// podGaps records the gaps in what the pod informer shows.
type podGaps struct {
	mu    sync.Mutex
	open  bool
	ended time.Time
	now   func() time.Time
}

func newPodGaps(now func() time.Time) *podGaps { return &podGaps{now: now} }

// failed records a failed list or watch, or a watch that ended with an error: the
// informer lists again before it shows anything more.
func (g *podGaps) failed() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = true
}

// listed records the outcome of one list request: a failure, or the last page of
// a list, which ends a gap.
func (g *podGaps) listed(list runtime.Object, err error) {
	switch {
	case err != nil:
		g.failed()
	case lastPage(list):
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.open {
			g.open, g.ended = false, g.now()
		}
	}
}

// WatchingSince returns when the last gap ended (zero: none yet), and false
// while one is open.
func (g *podGaps) WatchingSince() (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ended, !g.open
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
			gaps.listed(list, err)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w, err := pods.Watch(ctx, opts)
			if err != nil {
				gaps.failed()
				return nil, err
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
