// Package statusupdater writes node.status.volumesAttached, the list kubelet waits
// for before it mounts, from the controller's actual state: one merge patch per node
// whose list changed, covering every volume that changed with it, based on the
// informer's copy of the node (no GET), and nothing for a node that is gone.
package statusupdater

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/csivolume"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
)

const csiPrefix = "kubernetes.io/csi/"

// Updater keeps node.status.volumesAttached in step with the actual state.
type Updater struct {
	client  kubernetes.Interface
	nodes   corelisters.NodeLister
	actual  *cache.ActualState
	metrics *metrics.Metrics
	queue   workqueue.TypedRateLimitingInterface[string]
	// backlog tells how long other requests now wait for the client's rate limit.
	backlog func() time.Duration

	mu      sync.Mutex
	perNode map[string]*nodeRecord
	// scheduled holds the nodes whose write is waiting for its batch window.
	scheduled map[string]bool
}

// nodeRecord serialises the writes for one node and remembers the last list
// written, with the resourceVersion of the informer copy it was based on: while the
// informer still shows that version, the written list is the current one.
type nodeRecord struct {
	mu          sync.Mutex
	baseVersion string
	written     []v1.AttachedVolume
}

// New returns an Updater. backlog, if not nil, tells how long requests of the
// other clients now wait for the shared rate limit; writes are batched over that.
func New(client kubernetes.Interface, nodes corelisters.NodeLister, actual *cache.ActualState, m *metrics.Metrics, backlog func() time.Duration) *Updater {
	return &Updater{
		client:  client,
		backlog: backlog,
		nodes:   nodes,
		actual:  actual,
		metrics: m,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "node_status"}),
		perNode:   make(map[string]*nodeRecord),
		scheduled: make(map[string]bool),
	}
}

// A node's write waits for more changes to the same node, so that volumes attached
// together are reported in one patch: at least minBatchWindow, small next to the
// time kubelet takes to notice; and while other requests queue for the client's
// rate limit, as long as that queue takes to drain (at most maxBatchWindow). Node
// status writes jump that queue, so when the rate limit is the bottleneck they are
// few and large and leave the budget to the VolumeAttachment creates.
const (
	minBatchWindow = 20 * time.Millisecond
	maxBatchWindow = time.Minute
)

// Enqueue asks for the node's list to be written soon, together with the other
// changes to the node in the batch window. The window is set by the first change
// after the node's last write; later changes join it rather than move it.
func (u *Updater) Enqueue(node string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.scheduled[node] {
		return
	}
	u.scheduled[node] = true
	window := minBatchWindow
	if u.backlog != nil {
		window = min(max(u.backlog(), minBatchWindow), maxBatchWindow)
	}
	u.queue.AddAfter(node, window)
}

// Run writes queued nodes with the given number of workers until ctx ends.
func (u *Updater) Run(ctx context.Context, workers int) {
	defer u.queue.ShutDown()
	for range workers {
		go wait.UntilWithContext(ctx, u.work, time.Second)
	}
	<-ctx.Done()
}

func (u *Updater) work(ctx context.Context) {
	for {
		node, shutdown := u.queue.Get()
		if shutdown {
			return
		}
		u.mu.Lock()
		delete(u.scheduled, node)
		u.mu.Unlock()
		if _, err := u.Sync(ctx, node); err != nil {
			utilruntime.HandleErrorWithContext(ctx, err, "Writing node status failed, will retry", "node", node)
			u.queue.AddRateLimited(node)
		} else {
			u.queue.Forget(node)
		}
		u.queue.Done(node)
	}
}

// Forget drops what is remembered of a deleted node.
func (u *Updater) Forget(node string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.perNode, node)
}

func (u *Updater) record(node string) *nodeRecord {
	u.mu.Lock()
	defer u.mu.Unlock()
	r, ok := u.perNode[node]
	if !ok {
		r = &nodeRecord{}
		u.perNode[node] = r
	}
	return r
}

// Sync writes the node's status.volumesAttached now if it differs from the actual
// state, and returns once it is written, with the node as it stood right after (the
// patch's response, or the informer's copy when nothing needed writing). A node
// that does not exist has nothing to write and is returned as nil. Entries of other
// volume plugins are kept as they are.
func (u *Updater) Sync(ctx context.Context, nodeName string) (*v1.Node, error) {
	r := u.record(nodeName)
	r.mu.Lock()
	defer r.mu.Unlock()

	node, err := u.nodes.Get(nodeName)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading node %s from the informer: %w", nodeName, err)
	}
	if node.Annotations[cache.ManagedAnnotation] != "true" {
		return node, nil
	}
	current := node.Status.VolumesAttached
	if r.written != nil && node.ResourceVersion == r.baseVersion {
		current = r.written
	}
	want := desiredList(current, u.actual.ReportedVolumes(nodeName))
	if sameList(current, want) {
		return node, nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"volumesAttached": want}})
	if err != nil {
		return nil, fmt.Errorf("encoding the status patch of node %s: %w", nodeName, err)
	}
	patched, err := u.client.CoreV1().Nodes().Patch(ctx, nodeName, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		u.metrics.NodeStatusPatches.WithLabelValues("node-gone").Inc()
		return nil, nil
	}
	if err != nil {
		u.metrics.NodeStatusPatches.WithLabelValues("error").Inc()
		return nil, fmt.Errorf("patching status.volumesAttached of node %s: %w", nodeName, err)
	}
	u.metrics.NodeStatusPatches.WithLabelValues("success").Inc()
	klog.FromContext(ctx).V(4).Info("Wrote node status", "node", nodeName, "volumesAttached", len(want))
	r.baseVersion = node.ResourceVersion
	r.written = want
	return patched, nil
}

// desiredList is the CSI volumes the actual state reports, sorted, after the
// entries of other plugins that the node already lists.
func desiredList(current []v1.AttachedVolume, reported []csivolume.UniqueName) []v1.AttachedVolume {
	out := make([]v1.AttachedVolume, 0, len(reported))
	for _, av := range current {
		if !strings.HasPrefix(string(av.Name), csiPrefix) {
			out = append(out, av)
		}
	}
	for _, name := range reported {
		out = append(out, v1.AttachedVolume{Name: v1.UniqueVolumeName(name), DevicePath: ""})
	}
	return out
}

func sameList(a, b []v1.AttachedVolume) bool {
	if len(a) != len(b) {
		return false
	}
	key := func(av v1.AttachedVolume) string { return string(av.Name) + "\x00" + av.DevicePath }
	ak := make([]string, len(a))
	bk := make([]string, len(b))
	for i := range a {
		ak[i], bk[i] = key(a[i]), key(b[i])
	}
	slices.Sort(ak)
	slices.Sort(bk)
	return slices.Equal(ak, bk)
}
