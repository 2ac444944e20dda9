// Package statusupdater writes node.status.volumesAttached, the list kubelet waits
// for before it mounts, from the controller's actual state: one merge patch per node
// whose list changed, covering every volume that changed with it, and nothing for a
// node that is gone. Reports of new attachments are based on the informer's copy of
// the node (no GET); a detach asks for confirmation instead, which only what the API
// server itself returned can give. Both go out in the node's next batched write:
// detaches and attachments on one node in the same batch window share one patch.
package statusupdater

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/keyworkers"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/writegate"
)

// Updater keeps node.status.volumesAttached in step with the actual state.
type Updater struct {
	client  kubernetes.Interface
	nodes   corelisters.NodeLister
	actual  *cache.ActualState
	pods    PodChecker
	metrics *metrics.Metrics
	queue   workqueue.TypedRateLimitingInterface[string]
	// backlog tells how long other requests now wait for the client's rate limit.
	backlog func() time.Duration
	// minWindow is the shortest batch window, set by the operator.
	minWindow time.Duration
	// stopped is closed once no write will be made any more.
	stopped  chan struct{}
	stopOnce sync.Once

	mu      sync.Mutex
	perNode map[string]*nodeRecord
	// scheduled holds the nodes whose write is waiting for its batch window.
	scheduled map[string]window
	// waiting holds, by node, the confirmations asked for that no write has
	// answered yet.
	waiting map[string][]*confirmation
	// response is how long the API server took to answer the recent status
	// writes, a moving average from the first one (answered).
	response time.Duration
	answered bool
}

// nodeRecord serialises the writes for one node. It remembers the last list
// written, with the resourceVersion of the informer copy it was based on and the
// one the API server answered the write with: while the informer shows that base,
// or any version up to the write's own, the written list is the current one (a
// merge patch replaces the whole list, so nothing older than the write survives
// it). The informer delivers the controller's earlier writes after its later ones
// went out; judging from those copies would write the same list again.
type nodeRecord struct {
	mu             sync.Mutex
	baseVersion    string
	writtenVersion string
	written        []v1.AttachedVolume
}

// current is the list node status holds as far as the informer's copy and the
// controller's last write tell.
func (r *nodeRecord) current(node *v1.Node) []v1.AttachedVolume {
	if r.written == nil {
		return node.Status.VolumesAttached
	}
	if node.ResourceVersion == r.baseVersion {
		return r.written
	}
	// Resource versions of one resource are ordered; one that cannot be
	// compared leaves the informer's copy as the only guide.
	if cmp, err := resourceversion.CompareResourceVersion(node.ResourceVersion, r.writtenVersion); err == nil && cmp <= 0 {
		return r.written
	}
	return node.Status.VolumesAttached
}

// confirmation is one caller of Confirm waiting for a write that covers it.
type confirmation struct {
	done chan struct{}
	node *v1.Node
	err  error
}

// PodChecker reads the node's pods from the API server and tells whether one
// needs the volume (populator.PodChecker).
type PodChecker interface {
	NeededOnNode(ctx context.Context, volume volumename.UniqueName, node string) (bool, error)
}

// ErrStopped means the updater stopped before a write answered a confirmation.
var ErrStopped = errors.New("the node status updater stopped")

// New returns an Updater. pods is read right before a write that takes out a
// volume in use whose wait for unmount ran out. backlog, if not nil, tells how
// long requests of the other clients now wait for the shared rate limit; writes
// are batched over that, and over minWindow at least.
func New(client kubernetes.Interface, nodes corelisters.NodeLister, actual *cache.ActualState, pods PodChecker, m *metrics.Metrics, backlog func() time.Duration, minWindow time.Duration) *Updater {
	return &Updater{
		client:    client,
		pods:      pods,
		backlog:   backlog,
		minWindow: minWindow,
		nodes:     nodes,
		actual:    actual,
		metrics:   m,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "node_status"}),
		stopped:   make(chan struct{}),
		perNode:   make(map[string]*nodeRecord),
		scheduled: make(map[string]window),
		waiting:   make(map[string][]*confirmation),
	}
}

// A node's write waits for more changes to the same node, so that volumes attached
// or detached together are reported in one patch, for as long as the requests now
// queued for the client's rate limit take to be served, or as the API server took
// to answer the recent status writes, or as the operator's minimum, whichever is
// longer (at most MaxBatchWindow). With nothing queued, a quick server and no
// minimum, it is written at once.
// Node status writes jump that queue, so when the rate limit is the bottleneck
// they are few and large and leave the budget to the VolumeAttachment creates and
// deletes; when the server is slow, the changes that come while one write would be
// on its way go in that write, not in one right after it.
//
// A change that reports an attachment joins the window the node already has:
// kubelet waits for it. A detach may push the window back to the end of the
// queue as it stands when the detach asks: its delete would wait behind that queue
// anyway, and the detaches of one node, which kubelet frees one pod at a time,
// then share one write. No window ends later than MaxBatchWindow after it opened.
const MaxBatchWindow = time.Minute

// BatchWindow is how long a node's write waits for more changes to the node when
// the requests now queued for the client's rate limit take backlog to be served,
// the API server answers status writes in response, and the operator asks for
// minimum at least.
func BatchWindow(backlog, response, minimum time.Duration) time.Duration {
	return min(max(backlog, response, minimum, 0), MaxBatchWindow)
}

// responseWeight is the weight of the latest status write in the recent response
// time: about the last ten count.
const responseWeight = 0.1

// window is when a node's pending write opened and when it is due.
type window struct {
	opened, due time.Time
}

// Enqueue asks for the node's list to be written soon, together with the other
// changes to the node in the batch window. The window is set by the first change
// after the node's last write; later changes join it rather than move it.
func (u *Updater) Enqueue(node string) { u.schedule(node, false) }

// schedule opens the node's batch window, or, for a detach, pushes its end back
// to the end of the current backlog.
func (u *Updater) schedule(node string, detach bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	w, ok := u.scheduled[node]
	if ok && !detach {
		// An attachment joins the window the node has.
		return
	}
	var backlog time.Duration
	if u.backlog != nil {
		backlog = u.backlog()
	}
	wait := BatchWindow(backlog, u.response, u.minWindow)
	now := time.Now()
	switch {
	case !ok:
		u.scheduled[node] = window{opened: now, due: now.Add(wait)}
		u.queue.AddAfter(node, wait)
	case now.Add(wait).After(w.due):
		// The queue is told the earlier time already: the worker puts the
		// node back until the new one.
		w.due = now.Add(wait)
		if limit := w.opened.Add(MaxBatchWindow); w.due.After(limit) {
			w.due = limit
		}
		u.scheduled[node] = w
	}
}

// due tells whether the node's write is due now, and if not, puts it back in the
// queue until it is.
func (u *Updater) due(node string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	w, ok := u.scheduled[node]
	if ok {
		if left := time.Until(w.due); left > 0 {
			u.queue.AddAfter(node, left)
			return false
		}
	}
	delete(u.scheduled, node)
	return true
}

// ShutDown stops the queue, whether or not Run ran; confirmations still waiting
// fail with ErrStopped.
func (u *Updater) ShutDown() {
	u.queue.ShutDown()
	u.stopOnce.Do(func() { close(u.stopped) })
}

// Run writes queued nodes with the given number of workers until ctx ends.
func (u *Updater) Run(ctx context.Context, workers int) {
	defer u.ShutDown()
	keyworkers.Run(ctx, u.queue, workers, "node", func(ctx context.Context, node string) (time.Duration, error) {
		if !u.due(node) {
			return 0, nil
		}
		return 0, u.write(ctx, node)
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

// write is a queued node's turn: it answers the confirmations asked for until
// now with one write (or read) confirmed by the API server, or, if none waits,
// writes from the informer's copy as Sync does.
func (u *Updater) write(ctx context.Context, nodeName string) error {
	r := u.record(nodeName)
	r.mu.Lock()
	defer r.mu.Unlock()
	// Every confirmation taken here was asked for after its caller's change to
	// the actual state, and the list is computed after this point: the write
	// covers them all. Later ones wait for the next turn, which they enqueued.
	u.mu.Lock()
	covered := u.waiting[nodeName]
	delete(u.waiting, nodeName)
	u.mu.Unlock()
	if len(covered) == 0 {
		return u.sync(ctx, r, nodeName)
	}
	node, err := u.confirm(ctx, r, nodeName)
	for _, c := range covered {
		c.node, c.err = node, err
		close(c.done)
	}
	return err
}

// Sync writes the node's status.volumesAttached now if it differs from the actual
// state, judged from the informer's copy of the node. A node that does not exist
// has nothing to write. Entries of other volume plugins are kept as they are.
func (u *Updater) Sync(ctx context.Context, nodeName string) error {
	r := u.record(nodeName)
	r.mu.Lock()
	defer r.mu.Unlock()
	return u.sync(ctx, r, nodeName)
}

func (u *Updater) sync(ctx context.Context, r *nodeRecord, nodeName string) error {
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
	current := r.current(node)
	want, precondition, err := u.wanted(ctx, node, current)
	if err != nil || sameList(current, want) {
		return err
	}
	_, err = u.patch(ctx, r, node, want, precondition)
	return err
}

// Confirm makes the API server's status.volumesAttached of the node match the
// actual state as it stands when Confirm is called, and returns the node as the
// API server returned it once it does: the response to the patch, or to a read
// when no patch was needed. The write is the node's next batched one: calls for
// the same node, and the changes that enqueued it, share it. It returns nil for a
// node that does not exist, the node as the API server has it, unwritten, for a
// node this controller does not manage, and ErrStopped if the updater stops
// first.
func (u *Updater) Confirm(ctx context.Context, nodeName string) (*v1.Node, error) {
	c := &confirmation{done: make(chan struct{})}
	u.mu.Lock()
	u.waiting[nodeName] = append(u.waiting[nodeName], c)
	u.mu.Unlock()
	u.schedule(nodeName, true)
	select {
	case <-c.done:
		return c.node, c.err
	case <-ctx.Done():
		u.withdraw(nodeName, c)
		return nil, fmt.Errorf("waiting for a write of the status of node %s: %w", nodeName, ctx.Err())
	case <-u.stopped:
		u.withdraw(nodeName, c)
		return nil, ErrStopped
	}
}

// withdraw takes back a confirmation whose caller no longer waits.
func (u *Updater) withdraw(nodeName string, c *confirmation) {
	u.mu.Lock()
	defer u.mu.Unlock()
	rest := slices.DeleteFunc(u.waiting[nodeName], func(w *confirmation) bool { return w == c })
	if len(rest) == 0 {
		delete(u.waiting, nodeName)
		return
	}
	u.waiting[nodeName] = rest
}

// confirm writes the node's list from the actual state as it stands now and
// returns the node as the API server returned it (see Confirm).
func (u *Updater) confirm(ctx context.Context, r *nodeRecord, nodeName string) (*v1.Node, error) {
	base, err := u.nodes.Get(nodeName)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading node %s from the informer: %w", nodeName, err)
	}
	if base != nil && cache.IsManaged(base) {
		current := r.current(base)
		want, precondition, err := u.wanted(ctx, base, current)
		if err != nil {
			return nil, err
		}
		if !sameList(current, want) {
			patched, err := u.patch(ctx, r, base, want, precondition)
			if (err != nil && !apierrors.IsConflict(err)) || (err == nil && (patched == nil || sameList(patched.Status.VolumesAttached, want))) {
				return patched, err
			}
		}
	}
	// The informer's copy needed no patch, or the patch met a newer list than that
	// copy held, or a newer node than the one it was judged on: read what the API
	// server holds, and write again if it differs.
	fresh, err := u.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading node %s from the API server: %w", nodeName, err)
	case !cache.IsManaged(fresh):
		// kubelet attaches and detaches there itself: nothing to write, and the
		// node as it is tells the caller so.
		return fresh, nil
	}
	want, precondition, err := u.wanted(ctx, fresh, fresh.Status.VolumesAttached)
	if err != nil || sameList(fresh.Status.VolumesAttached, want) {
		return fresh, err
	}
	return u.patch(ctx, r, fresh, want, precondition)
}

// wanted returns the list node status should hold, given the list current that
// base, or the controller's last write on it, holds. An in-tree iSCSI or Fibre
// Channel volume has no other record than node status: one that a detach took
// out of what the actual state reports stays listed while base reports it in
// use, unless the force rule of that detach holds on base (once the detach is
// over, nothing records the volume and it goes). A write to a node that
// has, or may have, such volumes must apply to base's version of the node only
// (precondition is its resourceVersion), so that a node that changed since
// (kubelet reported a volume in use, or base was behind the API server) fails
// the write instead of losing a record. One in use whose wait for unmount ran
// out goes only if no pod of the node needs it as the API server lists them now:
// the write is the detach, and it may go out long after the detach began (found
// by the simulation: seed 777). kubelet may mount it for a new pod meanwhile
// without changing the node, which already reports it in use.
func (u *Updater) wanted(ctx context.Context, base *v1.Node, current []v1.AttachedVolume) (want []v1.AttachedVolume, precondition string, err error) {
	reported := u.actual.ReportedVolumes(base.Name)
	want = desiredList(current, reported)
	if u.actual.HasReportOnly(base.Name) {
		precondition = base.ResourceVersion
	}
	for _, av := range current {
		name := volumename.UniqueName(av.Name)
		if !volumename.ReportOnly(name) || slices.Contains(reported, name) {
			continue
		}
		precondition = base.ResourceVersion
		force, detaching := u.actual.DetachForce(name, base.Name)
		if !detaching || !slices.Contains(base.Status.VolumesInUse, av.Name) {
			continue
		}
		keep := !force.Holds(base)
		if !keep && force == cache.ForcedOnTimeout {
			if keep, err = u.pods.NeededOnNode(ctx, name, base.Name); err != nil {
				return nil, "", fmt.Errorf("reading the pods of node %s before taking out %s, forced on timeout: %w", base.Name, name, err)
			}
		}
		if keep {
			want = append(want, v1.AttachedVolume{Name: av.Name, DevicePath: ""})
		}
	}
	return want, precondition, nil
}

// patch writes want as the node's status.volumesAttached and records the result;
// with a precondition, only if the node's resourceVersion is still that.
func (u *Updater) patch(ctx context.Context, r *nodeRecord, base *v1.Node, want []v1.AttachedVolume, precondition string) (*v1.Node, error) {
	content := map[string]any{"status": map[string]any{"volumesAttached": want}}
	if precondition != "" {
		content["metadata"] = map[string]any{"resourceVersion": precondition}
	}
	body, err := json.Marshal(content)
	if err != nil {
		return nil, fmt.Errorf("encoding the status patch of node %s: %w", base.Name, err)
	}
	wctx, cancel, err := writegate.Open(ctx)
	if err != nil {
		return nil, fmt.Errorf("not patching status.volumesAttached of node %s: %w", base.Name, err)
	}
	defer cancel()
	sent := time.Now()
	patched, err := u.client.CoreV1().Nodes().Patch(wctx, base.Name, types.MergePatchType, body, metav1.PatchOptions{}, "status")
	u.answeredIn(time.Since(sent))
	if apierrors.IsNotFound(err) {
		u.metrics.NodeStatusPatches.WithLabelValues(metrics.PatchNodeGone).Inc()
		return nil, nil
	}
	if err != nil {
		u.metrics.NodeStatusPatches.WithLabelValues(metrics.PatchFailed).Inc()
		// The patch may or may not have been applied: forget the list written, so
		// that the next write starts from what the informer shows.
		r.written = nil
		return nil, fmt.Errorf("patching status.volumesAttached of node %s: %w", base.Name, err)
	}
	u.metrics.NodeStatusPatches.WithLabelValues(metrics.PatchSucceeded).Inc()
	klog.FromContext(ctx).V(4).Info("Wrote node status", "node", base.Name, "volumesAttached", len(want))
	r.baseVersion = base.ResourceVersion
	r.writtenVersion = ""
	if patched != nil {
		r.writtenVersion = patched.ResourceVersion
	}
	r.written = want
	return patched, nil
}

// answeredIn adds the time one status write took to the recent response time.
func (u *Updater) answeredIn(took time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.answered {
		u.response, u.answered = took, true
		return
	}
	u.response += time.Duration(responseWeight * float64(took-u.response))
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
