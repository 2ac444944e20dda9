// Package statusupdater writes node.status.volumesAttached, the list kubelet waits
// for before it mounts, from the controller's actual state: one merge patch per node
// whose list changed, covering every volume that changed with it, and nothing for a
// node that is gone. Reports of new attachments are based on the informer's copy of
// the node (no GET); a detach asks for confirmation instead, which only what the API
// server itself returned can give.
package statusupdater

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/keyworkers"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// Updater keeps node.status.volumesAttached in step with the actual state.
type Updater struct {
	client  kubernetes.Interface
	nodes   corelisters.NodeLister
	actual  *cache.ActualState
	metrics *metrics.Metrics
	queue   workqueue.TypedRateLimitingInterface[string]
	// backlog tells how long other requests now wait for the client's rate limit.
	backlog func() time.Duration

	// tickets orders confirmations and the requests that answer them.
	tickets atomic.Uint64

	mu      sync.Mutex
	perNode map[string]*nodeRecord
	// scheduled holds the nodes whose write is waiting for its batch window.
	scheduled map[string]bool
}

// nodeRecord serialises the writes for one node. It remembers the last list
// written, with the resourceVersion of the informer copy it was based on: while the
// informer still shows that version, the written list is the current one. It also
// keeps the node as the API server last returned it, with the ticket taken when
// that request was sent, so that confirmations asked for before then share it.
type nodeRecord struct {
	mu          sync.Mutex
	baseVersion string
	written     []v1.AttachedVolume
	fresh       *v1.Node
	freshTicket uint64
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

// ShutDown stops the queue, whether or not Run ran.
func (u *Updater) ShutDown() { u.queue.ShutDown() }

// Run writes queued nodes with the given number of workers until ctx ends.
func (u *Updater) Run(ctx context.Context, workers int) {
	keyworkers.Run(ctx, u.queue, workers, "node", func(ctx context.Context, node string) error {
		u.mu.Lock()
		delete(u.scheduled, node)
		u.mu.Unlock()
		return u.Sync(ctx, node)
	})
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
// state, judged from the informer's copy of the node. A node that does not exist
// has nothing to write. Entries of other volume plugins are kept as they are.
func (u *Updater) Sync(ctx context.Context, nodeName string) error {
	r := u.record(nodeName)
	r.mu.Lock()
	defer r.mu.Unlock()
	node, err := u.nodes.Get(nodeName)
	if apierrors.IsNotFound(err) {
		u.Forget(nodeName)
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading node %s from the informer: %w", nodeName, err)
	}
	if !cache.IsManaged(node) {
		return nil
	}
	current := node.Status.VolumesAttached
	if r.written != nil && node.ResourceVersion == r.baseVersion {
		current = r.written
	}
	want := desiredList(current, u.actual.ReportedVolumes(nodeName))
	if sameList(current, want) {
		return nil
	}
	_, err = u.patch(ctx, r, node, want, u.tickets.Add(1))
	return err
}

// Confirm makes the API server's status.volumesAttached of the node match the
// actual state as it stands when Confirm is called, and returns the node as the
// API server returned it once it does: the response to the patch, or to a read
// when no patch was needed. Calls for the same node made while a request is on its
// way share the next one. It returns nil for a node that does not exist, or that
// is not managed by this controller.
func (u *Updater) Confirm(ctx context.Context, nodeName string) (*v1.Node, error) {
	ticket := u.tickets.Add(1)
	r := u.record(nodeName)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.freshTicket > ticket {
		return r.fresh, nil
	}
	base, err := u.nodes.Get(nodeName)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading node %s from the informer: %w", nodeName, err)
	}
	if base != nil && cache.IsManaged(base) {
		current := base.Status.VolumesAttached
		if r.written != nil && base.ResourceVersion == r.baseVersion {
			current = r.written
		}
		if want := desiredList(current, u.actual.ReportedVolumes(nodeName)); !sameList(current, want) {
			patched, err := u.patch(ctx, r, base, want, u.tickets.Add(1))
			if err != nil || patched == nil || sameList(patched.Status.VolumesAttached, want) {
				return patched, err
			}
		}
	}
	// The informer's copy needed no patch, or the patch met a newer list than that
	// copy held: read what the API server holds, and write again if it differs.
	readTicket := u.tickets.Add(1)
	fresh, err := u.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		r.fresh, r.freshTicket = nil, readTicket
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading node %s from the API server: %w", nodeName, err)
	case !cache.IsManaged(fresh):
		r.fresh, r.freshTicket = nil, readTicket
		return nil, nil
	}
	r.fresh, r.freshTicket = fresh, readTicket
	want := desiredList(fresh.Status.VolumesAttached, u.actual.ReportedVolumes(nodeName))
	if sameList(fresh.Status.VolumesAttached, want) {
		return fresh, nil
	}
	return u.patch(ctx, r, fresh, want, u.tickets.Add(1))
}

// patch writes want as the node's status.volumesAttached and records the result.
// ticket was taken before the request was sent.
func (u *Updater) patch(ctx context.Context, r *nodeRecord, base *v1.Node, want []v1.AttachedVolume, ticket uint64) (*v1.Node, error) {
	body, err := json.Marshal(map[string]any{"status": map[string]any{"volumesAttached": want}})
	if err != nil {
		return nil, fmt.Errorf("encoding the status patch of node %s: %w", base.Name, err)
	}
	patched, err := u.client.CoreV1().Nodes().Patch(ctx, base.Name, types.MergePatchType, body, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		u.metrics.NodeStatusPatches.WithLabelValues("node-gone").Inc()
		r.fresh, r.freshTicket = nil, ticket
		return nil, nil
	}
	if err != nil {
		u.metrics.NodeStatusPatches.WithLabelValues("error").Inc()
		// The patch may or may not have been applied: forget the list written, so
		// that the next write starts from what the informer shows.
		r.written = nil
		return nil, fmt.Errorf("patching status.volumesAttached of node %s: %w", base.Name, err)
	}
	u.metrics.NodeStatusPatches.WithLabelValues("success").Inc()
	klog.FromContext(ctx).V(4).Info("Wrote node status", "node", base.Name, "volumesAttached", len(want))
	r.baseVersion = base.ResourceVersion
	r.written = want
	r.fresh, r.freshTicket = patched, ticket
	return patched, nil
}

// desiredList is the volumes the actual state reports, sorted, after the entries
// the node already lists of plugins this controller does not report.
func desiredList(current []v1.AttachedVolume, reported []volumename.UniqueName) []v1.AttachedVolume {
	out := make([]v1.AttachedVolume, 0, len(reported))
	for _, av := range current {
		if name := volumename.UniqueName(av.Name); !volumename.IsCSI(name) && !volumename.ReportOnly(name) {
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
