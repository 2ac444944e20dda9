// Package populator builds the desired state from the API objects: for each pod
// that has a node and is not terminated, the attachable CSI volumes it needs,
// reached through its claims, generic ephemeral volumes, PersistentVolumes and
// in-tree volumes translated to CSI. It also knows which pods a change to a claim, a
// PersistentVolume or a CSIDriver affects, so that exactly those are re-evaluated,
// and, through PodChecker, whether a node's pods as the API server lists them
// need a volume.
package populator

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-helpers/storage/ephemeral"
	csitranslation "k8s.io/csi-translation-lib"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/keyworkers"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// ClaimIndex is the name of the pod informer index by "namespace/claim" of every
// claim a pod uses, generic ephemeral ones included.
const ClaimIndex = "claim"

// ClaimIndexFunc indexes pods by the claims they use. Add it to the pod informer
// under ClaimIndex before the informer starts.
func ClaimIndexFunc(obj any) ([]string, error) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return nil, nil
	}
	var keys []string
	for i := range pod.Spec.Volumes {
		if name := claimName(pod, &pod.Spec.Volumes[i]); name != "" {
			keys = append(keys, pod.Namespace+"/"+name)
		}
	}
	return keys, nil
}

func claimName(pod *v1.Pod, vol *v1.Volume) string {
	switch {
	case vol.PersistentVolumeClaim != nil:
		return vol.PersistentVolumeClaim.ClaimName
	case vol.Ephemeral != nil:
		return ephemeral.VolumeClaimName(pod, vol)
	}
	return ""
}

// Listers are the informer caches the populator reads.
type Listers struct {
	Pods       corelisters.PodLister
	PodIndexer toolscache.Indexer
	Claims     corelisters.PersistentVolumeClaimLister
	PVs        corelisters.PersistentVolumeLister
	Drivers    storagelisters.CSIDriverLister
}

// Populator keeps the desired state in step with pods and what they reference.
// Pods are re-evaluated from a work queue keyed by pod, so that one pod is never
// evaluated twice at once: an older evaluation finishing last could bring back a
// pod that is gone.
type Populator struct {
	listers    Listers
	desired    *cache.DesiredState
	translator csitranslation.CSITranslator
	// changed receives the volumes whose desired state changed.
	changed VolumeQueue
	queue   workqueue.TypedRateLimitingInterface[string]

	mu           sync.Mutex
	podsByDriver map[string]map[string]struct{}
	driversByPod map[string][]string
}

// VolumeQueue takes the volumes whose desired state changed (the reconciler's
// queue).
type VolumeQueue interface {
	Enqueue(volume volumename.UniqueName)
}

// New returns a Populator that records into desired and reports changed volumes.
func New(listers Listers, desired *cache.DesiredState, changed VolumeQueue) *Populator {
	return &Populator{
		listers:    listers,
		desired:    desired,
		translator: csitranslation.New(),
		changed:    changed,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "pods"}),
		podsByDriver: make(map[string]map[string]struct{}),
		driversByPod: make(map[string][]string),
	}
}

// Enqueue asks for the pod with the given namespace/name key to be re-evaluated.
func (p *Populator) Enqueue(key string) { p.queue.Add(key) }

// ShutDown stops the queue, whether or not Run ran.
func (p *Populator) ShutDown() { p.queue.ShutDown() }

// Run re-evaluates queued pods with the given number of workers until ctx ends.
func (p *Populator) Run(ctx context.Context, workers int) {
	keyworkers.Run(ctx, p.queue, workers, "pod", func(ctx context.Context, key string) (time.Duration, error) {
		return 0, p.SyncPod(ctx, key)
	})
}

// Drain evaluates the queued pods on the given number of workers until more is
// closed and nothing is left queued: at start-up, while the event handlers still
// queue the pods they deliver, and before Run. As in Run, the queue keeps
// evaluations of one pod apart. It returns early if ctx ends, and tells how many
// evaluations it made.
func (p *Populator) Drain(ctx context.Context, workers int, more <-chan struct{}) int {
	keys := make(chan string)
	var wg sync.WaitGroup
	var evaluated atomic.Int64
	for range max(workers, 1) {
		wg.Go(func() {
			for key := range keys {
				evaluated.Add(1)
				if err := p.SyncPod(ctx, key); err != nil {
					klog.FromContext(ctx).Error(err, "Evaluating a pod at start-up failed, will retry", "pod", key)
					p.queue.AddRateLimited(key)
				}
				p.queue.Done(key)
			}
		})
	}
	p.sendQueued(ctx, keys, more)
	close(keys)
	wg.Wait()
	return int(evaluated.Load())
}

// sendQueued hands the queued pods to keys until more is closed and nothing is
// left queued, or ctx ends.
func (p *Populator) sendQueued(ctx context.Context, keys chan<- string, more <-chan struct{}) {
	poll := time.NewTicker(drainPollPeriod)
	defer poll.Stop()
	for {
		if p.queue.Len() > 0 {
			key, shutdown := p.queue.Get()
			if shutdown {
				return
			}
			keys <- key
			continue
		}
		select {
		case <-more:
			if p.queue.Len() == 0 {
				return
			}
		case <-ctx.Done():
			return
		case <-poll.C:
		}
	}
}

// drainPollPeriod is how often Drain looks for pods queued after it found none.
const drainPollPeriod = 5 * time.Millisecond

// SyncPod re-evaluates the pod with the given namespace/name key now. Outside of
// start-up, use Enqueue: it keeps evaluations of one pod apart.
func (p *Populator) SyncPod(ctx context.Context, key string) error {
	logger := klog.FromContext(ctx)
	namespace, name, err := toolscache.SplitMetaNamespaceKey(key)
	if err != nil {
		logger.Error(err, "Bad pod key", "key", key)
		return nil
	}
	pod, err := p.listers.Pods.Pods(namespace).Get(name)
	if apierrors.IsNotFound(err) || (err == nil && !NeedsVolumes(pod)) {
		p.setDrivers(key, nil)
		p.report(p.desired.DeletePod(key))
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading pod %s from the informer: %w", key, err)
	}
	vols, drivers := p.podVolumes(klog.LoggerWithValues(logger, "pod", klog.KObj(pod)), pod)
	p.setDrivers(key, drivers)
	ref := cache.PodRef{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
	p.report(p.desired.SetPod(ref, pod.Spec.NodeName, vols))
	return nil
}

// PodEnded takes the last state of a pod that counted, as the informer
// delivered it when the pod was deleted or terminated: its volumes count as needed
// on its node until now. The pod's evaluation reads the informer's cache later
// and may find it gone, never having recorded it.
func (p *Populator) PodEnded(ctx context.Context, pod *v1.Pod) {
	if !NeedsVolumes(pod) {
		return
	}
	vols, _ := p.podVolumes(klog.LoggerWithValues(klog.FromContext(ctx), "pod", klog.KObj(pod)), pod)
	names := make([]volumename.UniqueName, 0, len(vols))
	for _, v := range vols {
		names = append(names, v.Name)
	}
	p.report(p.desired.PodEnded(pod.Spec.NodeName, names))
}

// AllPods returns the key of every pod the informer holds or the desired state
// records: what a full pass must re-evaluate.
func (p *Populator) AllPods() ([]string, error) {
	pods, err := p.listers.Pods.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing pods from the informer: %w", err)
	}
	keys := make(map[string]struct{}, len(pods))
	for _, pod := range pods {
		keys[pod.Namespace+"/"+pod.Name] = struct{}{}
	}
	for _, key := range p.desired.PodKeys() {
		keys[key] = struct{}{}
	}
	return slices.Sorted(maps.Keys(keys)), nil
}

// PodsForClaim returns the keys of the pods that use the claim.
func (p *Populator) PodsForClaim(namespace, name string) []string {
	objs, err := p.listers.PodIndexer.ByIndex(ClaimIndex, namespace+"/"+name)
	if err != nil {
		return nil
	}
	keys := make([]string, 0, len(objs))
	for _, obj := range objs {
		if pod, ok := obj.(*v1.Pod); ok {
			keys = append(keys, pod.Namespace+"/"+pod.Name)
		}
	}
	slices.Sort(keys)
	return keys
}

// PodsForPV returns the keys of the pods that reach the PV through its claim.
func (p *Populator) PodsForPV(pv *v1.PersistentVolume) []string {
	if pv.Spec.ClaimRef == nil {
		return nil
	}
	return p.PodsForClaim(pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name)
}

// PodsForDriver returns the keys of the pods that use a volume of the CSI driver.
func (p *Populator) PodsForDriver(driver string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.podsByDriver[driver]))
}

func (p *Populator) setDrivers(podKey string, drivers []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range p.driversByPod[podKey] {
		if set := p.podsByDriver[d]; set != nil {
			delete(set, podKey)
			if len(set) == 0 {
				delete(p.podsByDriver, d)
			}
		}
	}
	if len(drivers) == 0 {
		delete(p.driversByPod, podKey)
		return
	}
	p.driversByPod[podKey] = drivers
	for _, d := range drivers {
		if p.podsByDriver[d] == nil {
			p.podsByDriver[d] = make(map[string]struct{})
		}
		p.podsByDriver[d][podKey] = struct{}{}
	}
}

func (p *Populator) report(changed []volumename.UniqueName) {
	for _, name := range changed {
		p.changed.Enqueue(name)
	}
}

// PodNeeds tells whether the pod, as given (for instance read from the API server
// rather than the informer), counts and needs the volume.
func (p *Populator) PodNeeds(ctx context.Context, pod *v1.Pod, volume volumename.UniqueName) bool {
	if !NeedsVolumes(pod) {
		return false
	}
	vols, _ := p.podVolumes(klog.FromContext(ctx), pod)
	return slices.ContainsFunc(vols, func(v cache.Volume) bool { return v.Name == volume })
}

// NeedsVolumes tells whether the pod counts: it has a node and is not terminated.
func NeedsVolumes(pod *v1.Pod) bool {
	if pod.Spec.NodeName == "" {
		return false
	}
	if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		return false
	}
	if pod.DeletionTimestamp == nil {
		return true
	}
	return anyRunning(pod.Status.InitContainerStatuses) || anyRunning(pod.Status.ContainerStatuses) ||
		anyRunning(pod.Status.EphemeralContainerStatuses)
}

func anyRunning(statuses []v1.ContainerStatus) bool {
	for _, s := range statuses {
		if s.State.Terminated == nil && s.State.Waiting == nil {
			return true
		}
	}
	return false
}
