package watchrecord

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
)

// lapsesInformer is an informer with the record of its lapses and of its quorum
// reads.
type lapsesInformer struct {
	toolscache.SharedIndexInformer
	lapses *Lapses
	reads  *Reads
}

// gapsInformer is an informer with the record of its gaps and of its quorum
// reads.
type gapsInformer struct {
	toolscache.SharedIndexInformer
	gaps  *Gaps
	reads *Reads
}

// readsInformer is an informer with the record of its quorum reads.
type readsInformer struct {
	toolscache.SharedIndexInformer
	reads *Reads
}

// AttachmentLapses makes the factory's VolumeAttachment informer record its
// lapses and its quorum reads, and returns the records. It fails if the factory
// made that informer already without them.
func AttachmentLapses(f informers.SharedInformerFactory) (*Lapses, *Reads, error) {
	recorded, ok := f.InformerFor(&storagev1.VolumeAttachment{}, newAttachmentInformer).(*lapsesInformer)
	if !ok {
		return nil, nil, fmt.Errorf("the factory's VolumeAttachment informer was made before the controller's: its watches cannot be followed")
	}
	return recorded.lapses, recorded.reads, nil
}

// PodGaps makes the factory's pod informer record its gaps and its quorum
// reads, and returns the records. It fails if the factory made that informer
// already without them.
func PodGaps(f informers.SharedInformerFactory) (*Gaps, *Reads, error) {
	recorded, ok := f.InformerFor(&v1.Pod{}, newPodInformer).(*gapsInformer)
	if !ok {
		return nil, nil, fmt.Errorf("the factory's pod informer was made before the controller's: its gaps cannot be followed")
	}
	return recorded.gaps, recorded.reads, nil
}

// NodeReads makes the factory's node informer record its quorum reads, and
// returns the record. It fails if the factory made that informer already
// without one.
func NodeReads(f informers.SharedInformerFactory) (*Reads, error) {
	recorded, ok := f.InformerFor(&v1.Node{}, newNodeInformer).(*readsInformer)
	if !ok {
		return nil, fmt.Errorf("the factory's node informer was made before the controller's: its reads cannot be followed")
	}
	return recorded.reads, nil
}

// QuorumPageSize is the number of objects in each page of an informer's list of
// the present (the controller's own lists at start-up, of metadata only, have
// larger pages). Such a list is paged,
// each page waiting its turn at the API server, and, where the API server cannot
// serve it from its cache (etcd before 3.5.13), reading etcd: client-go's pages of
// 500 made 100 of them for 50,000 objects. A take-over's proof of its
// VolumeAttachments took 9 s that way at 50,000, about 4 s in pages of 2,000.
// A page of 2,000 holds a few megabytes of VolumeAttachments, and about 16 MB of
// pods with their containers' specs.
const QuorumPageSize = 2000

// listPresent is an informer's list, recorded in reads. Its first list, which
// client-go asks of the API server's cache (resourceVersion 0), asks for the
// present instead, so that a leader whose informer listed after it began to lead
// needs no second list at start-up. A paged list asks for pages of
// QuorumPageSize.
func listPresent(reads *Reads, list func(context.Context, metav1.ListOptions) (runtime.Object, error)) func(context.Context, metav1.ListOptions) (runtime.Object, error) {
	return func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		if opts.ResourceVersion == "0" {
			opts.ResourceVersion = ""
		}
		if opts.Limit > 0 {
			opts.Limit = max(opts.Limit, QuorumPageSize)
		}
		reads.ListSent(opts)
		out, err := list(ctx, opts)
		reads.Listed(out, err)
		return out, err
	}
}

// newAttachmentInformer makes the VolumeAttachment informer, which records its
// lapses and its quorum reads.
func newAttachmentInformer(client kubernetes.Interface, resync time.Duration) toolscache.SharedIndexInformer {
	record := NewLapses()
	reads := &Reads{lapses: record}
	vas := client.StorageV1().VolumeAttachments()
	list := listPresent(reads, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return vas.List(ctx, opts)
	})
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			out, err := list(ctx, opts)
			record.Listed(out, err)
			return out, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			initial := reads.initialEvents(opts)
			w, err := vas.Watch(ctx, opts)
			n := record.WatchStarted(err)
			if err != nil {
				return nil, err
			}
			// An end at shutdown is no lapse: nothing decides any more.
			return newRecordedWatch(w, initial, func(bool) {
				if ctx.Err() == nil {
					record.WatchEnded(n)
				}
			}), nil
		},
	}
	return &lapsesInformer{SharedIndexInformer: newInformer(lw, client, &storagev1.VolumeAttachment{}, resync), lapses: record, reads: reads}
}

// newNodeInformer makes the node informer, which records its quorum reads.
func newNodeInformer(client kubernetes.Interface, resync time.Duration) toolscache.SharedIndexInformer {
	reads := &Reads{}
	nodes := client.CoreV1().Nodes()
	lw := &toolscache.ListWatch{
		ListWithContextFunc: listPresent(reads, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return nodes.List(ctx, opts)
		}),
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			initial := reads.initialEvents(opts)
			w, err := nodes.Watch(ctx, opts)
			if err != nil {
				return nil, err
			}
			return newRecordedWatch(w, initial, func(bool) {}), nil
		},
	}
	return &readsInformer{SharedIndexInformer: newInformer(lw, client, &v1.Node{}, resync), reads: reads}
}

// newPodInformer makes the pod informer, which records its gaps and its quorum
// reads.
func newPodInformer(client kubernetes.Interface, resync time.Duration) toolscache.SharedIndexInformer {
	gaps := NewGaps(time.Now)
	reads := &Reads{}
	pods := client.CoreV1().Pods(metav1.NamespaceAll)
	list := listPresent(reads, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return pods.List(ctx, opts)
	})
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list, err := list(ctx, opts)
			switch {
			case err != nil:
				gaps.Failed()
			case LastPage(list):
				gaps.Relisted()
			}
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			initial := reads.initialEvents(opts)
			w, err := pods.Watch(ctx, opts)
			switch {
			case err != nil:
				gaps.Failed()
				return nil, err
			case opts.SendInitialEvents != nil && *opts.SendInitialEvents:
				gaps.Relisted()
			default:
				gaps.Resumed()
			}
			return newRecordedWatch(w, initial, func(errored bool) {
				if errored && ctx.Err() == nil {
					gaps.Failed()
				}
			}), nil
		},
	}
	return &gapsInformer{SharedIndexInformer: newInformer(lw, client, &v1.Pod{}, resync), gaps: gaps, reads: reads}
}

// newInformer makes the informer the factory would make, on lw.
func newInformer(lw *toolscache.ListWatch, client kubernetes.Interface, obj runtime.Object, resync time.Duration) toolscache.SharedIndexInformer {
	return toolscache.NewSharedIndexInformer(toolscache.ToListWatcherWithWatchListSemantics(lw, client), obj, resync,
		toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
}
