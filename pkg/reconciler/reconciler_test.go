package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	clienttesting "k8s.io/client-go/testing"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/attachdetach-controller/attachdetach-controller/internal/fakeevents"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/operationexecutor"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/podevents"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/reconciler"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

const maxWait = 6 * time.Minute

// call is one operation the executor started for the reconciler.
type call struct {
	op    string
	node  string
	force cache.ForceRule
}

func (c call) String() string {
	if c.force != cache.NotForced {
		return c.op + "@" + c.node + "(" + string(c.force) + ")"
	}
	return c.op + "@" + c.node
}

func attachOn(node string) call { return call{op: "attach", node: node} }
func detachOn(node string) call { return call{op: "detach", node: node} }
func forceDetachOn(node string, reason cache.ForceRule) call {
	return call{op: "detach", node: node, force: reason}
}

// executor is the real operation executor, with its real locks, holder check and
// backoff, recording the operations it started.
type executor struct {
	*operationexecutor.Executor

	mu    sync.Mutex
	calls []call
	// startErr, when set, is returned instead of asking the executor.
	startErr error
}

func (e *executor) record(c call, err error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err == nil {
		e.calls = append(e.calls, c)
	}
	return err
}

func (e *executor) injected() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.startErr
}

func (e *executor) Attach(ctx context.Context, vol cache.Volume, node string, pods []cache.PodRef) error {
	if err := e.injected(); err != nil {
		return err
	}
	return e.record(attachOn(node), e.Executor.Attach(ctx, vol, node, pods))
}

func (e *executor) Detach(ctx context.Context, on cache.OnNode, force cache.ForceRule) error {
	if err := e.injected(); err != nil {
		return err
	}
	return e.record(forceDetachOn(on.Node, force), e.Executor.Detach(ctx, on, force))
}

func (e *executor) started() []call {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.calls)
}

// nodeStatus stands for the status updater. Confirm returns the node as the
// API server has it: by default what the node register holds, unless the test
// says the API server knows better; gate, when set, holds Confirm until closed.
type nodeStatus struct {
	nodes *cache.Nodes

	mu       sync.Mutex
	fresh    map[string]*v1.Node
	gate     chan struct{}
	enqueued []string
}

func (s *nodeStatus) Confirm(ctx context.Context, name string) (*v1.Node, error) {
	s.mu.Lock()
	gate := s.gate
	fresh, ok := s.fresh[name]
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if ok {
		return fresh.DeepCopy(), nil
	}
	n := s.nodes.Get(name)
	if !n.Exists() {
		return nil, nil
	}
	return nodeObject(n), nil
}

// get answers a read of the node from the API server as Confirm does.
func (s *nodeStatus) get(a clienttesting.Action) (bool, runtime.Object, error) {
	name := a.(clienttesting.GetAction).GetName()
	node, err := s.Confirm(context.Background(), name)
	if err == nil && node == nil {
		err = apierrors.NewNotFound(v1.Resource("nodes"), name)
	}
	return true, node, err
}

func (s *nodeStatus) Enqueue(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.enqueued = append(s.enqueued, node)
}

func (s *nodeStatus) enqueuedNodes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.enqueued)
}

// nodeObject is the Node object that reads as n.
func nodeObject(n cache.Node) *v1.Node {
	obj := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Annotations: map[string]string{}}}
	if n.Managed {
		obj.Annotations[cache.ManagedAnnotation] = "true"
	}
	ready := v1.ConditionFalse
	if n.Ready {
		ready = v1.ConditionTrue
	}
	obj.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: ready}}
	if n.OutOfService {
		obj.Spec.Taints = []v1.Taint{{Key: cache.OutOfServiceTaint, Effect: v1.TaintEffectNoExecute}}
	}
	for _, v := range slices.Sorted(maps.Keys(n.InUse)) {
		obj.Status.VolumesInUse = append(obj.Status.VolumesInUse, v1.UniqueVolumeName(v))
	}
	return obj
}

// harness is a reconciler on real cache objects and the real executor, on a
// fake API server, with a fake clock for the reconciler. Operations the executor
// starts run until the test ends: the VolumeAttachment informer they wait for is
// only told what a test tells it.
type harness struct {
	t        *testing.T
	ctx      context.Context
	client   *fake.Clientset
	vas      toolscache.Indexer
	desired  *cache.DesiredState
	actual   *cache.ActualState
	nodes    *cache.Nodes
	status   *nodeStatus
	exec     *executor
	recorder *record.FakeRecorder
	metrics  *metrics.Metrics
	now      time.Time
	r        *reconciler.Reconciler
	// ended counts the operations that have ended.
	ended atomic.Int64
}

type harnessOpts struct {
	disableForceDetach bool
	// perDriver and detachOnShutdownTaint are the reconciler's settings of those
	// names.
	perDriver             map[string]reconciler.DriverUnmountPolicy
	detachOnShutdownTaint bool
	// timeout bounds one operation; a minute if zero.
	timeout time.Duration
}

func newHarness(t *testing.T, disableForceDetach bool) *harness {
	return newHarnessWith(t, harnessOpts{disableForceDetach: disableForceDetach})
}

func newHarnessWith(t *testing.T, opts harnessOpts) *harness {
	t.Helper()
	if opts.timeout == 0 {
		opts.timeout = time.Minute
	}
	h := &harness{
		t:        t,
		ctx:      t.Context(),
		client:   fake.NewClientset(),
		vas:      toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{}),
		desired:  cache.NewDesiredState(),
		actual:   cache.NewActualState(),
		nodes:    cache.NewNodes(),
		recorder: record.NewFakeRecorder(100),
		metrics:  metrics.New(),
		now:      time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC),
	}
	h.status = &nodeStatus{nodes: h.nodes, fresh: map[string]*v1.Node{}}
	h.client.PrependReactor("get", "nodes", h.status.get)
	h.exec = &executor{Executor: operationexecutor.New(operationexecutor.Config{
		Client:     h.client,
		VALister:   storagelisters.NewVolumeAttachmentLister(h.vas),
		Actual:     h.actual,
		Nodes:      h.nodes,
		NodeStatus: h.status,
		// The executor's own events are not what these tests look at.
		Events:  podevents.NewEmitter(record.NewFakeRecorder(100)),
		Metrics: metrics.New(),
		Timeout: opts.timeout,
		Wanted:  h.desired,
		Pods:    desiredPods{h.desired},
		Done:    endedCounter{&h.ended},
	})}
	h.r = reconciler.New(reconciler.Config{
		Desired:    h.desired,
		Actual:     h.actual,
		Nodes:      h.nodes,
		Executor:   h.exec,
		NodeStatus: h.status,
		Events:     podevents.NewEmitter(h.recorder),
		Metrics:    h.metrics,
		UnmountPolicy: reconciler.UnmountPolicy{
			Default:    reconciler.DriverUnmountPolicy{MaxWait: maxWait},
			NeverForce: opts.disableForceDetach,
			PerDriver:  opts.perDriver,
		},
		DetachOnShutdownTaint: opts.detachOnShutdownTaint,
		Now:                   func() time.Time { return h.now },
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.exec.Wait(ctx); err != nil {
			t.Errorf("operations still running after the test: %v", err)
		}
	})
	return h
}

func (h *harness) sync(vol cache.Volume) time.Duration { return h.r.Sync(h.ctx, vol.Name) }

func (h *harness) events() []string { return fakeevents.Drain(h.recorder) }

// waitAttachesHold waits until every attach started has made its record, which
// holds the volume on its node: the executor makes it on the operation's own
// goroutine, and a later sync must not depend on how far that got.
func (h *harness) waitAttachesHold(vol cache.Volume) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range h.exec.started() {
		for c.op == "attach" && !slices.Contains(h.actual.Holders(vol.Name, vol.PVName, ""), c.node) {
			if time.Now().After(deadline) {
				h.t.Fatalf("the attach on %s made no record within 10 s", c.node)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// desiredPods answers the executor's read of a node's pods from the desired
// state: in these tests the API server holds the pods the informer shows.
type desiredPods struct{ desired *cache.DesiredState }

func (p desiredPods) NeededOnNode(_ context.Context, v volumename.UniqueName, node string) (bool, error) {
	return p.desired.IsDesired(v, node), nil
}

// endedCounter counts the operations that have ended.
type endedCounter struct{ n *atomic.Int64 }

func (c endedCounter) Enqueue(volumename.UniqueName) { c.n.Add(1) }

// waitIdle waits until every operation started has ended. (Executor.Wait is
// for shutdown: no operation starts after it.)
func (h *harness) waitIdle() {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for h.ended.Load() < int64(len(h.exec.started())) {
		if time.Now().After(deadline) {
			h.t.Fatalf("operations still running: %d started, %d ended", len(h.exec.started()), h.ended.Load())
		}
		time.Sleep(time.Millisecond)
	}
}

var (
	rwo = cache.Volume{
		Name: volumename.CSI("d", "h-rwo"), Driver: "d", Handle: "h-rwo",
		PVName: "pv-rwo", DisplayName: "pv-rwo",
	}
	rwx = cache.Volume{
		Name: volumename.CSI("d", "h-rwx"), Driver: "d", Handle: "h-rwx",
		PVName: "pv-rwx", DisplayName: "pv-rwx", MultiAttach: true,
	}
)

// nodeOpt changes a healthy managed node.
type nodeOpt func(*cache.Node)

func notReady(n *cache.Node)     { n.Ready = false }
func unmanaged(n *cache.Node)    { n.Managed = false }
func outOfService(n *cache.Node) { n.OutOfService = true }
func shutdown(n *cache.Node)     { n.Shutdown = true }
func mounting(vols ...cache.Volume) nodeOpt {
	return func(n *cache.Node) {
		for _, v := range vols {
			n.InUse[v.Name] = struct{}{}
		}
	}
}

func (h *harness) node(name string, opts ...nodeOpt) {
	n := cache.Node{Name: name, Presence: cache.NodePresent, Managed: true, Ready: true, InUse: map[volumename.UniqueName]struct{}{}}
	for _, o := range opts {
		o(&n)
	}
	h.nodes.Set(n)
}

func (h *harness) pod(namespace, name, node string, vol cache.Volume) {
	h.desired.SetPod(cache.PodRef{Namespace: namespace, Name: name, UID: types.UID(namespace + "-" + name)}, node, []cache.Volume{vol})
}

func vaName(vol cache.Volume, node string) string {
	return volumename.AttachmentName(vol.Handle, vol.Driver, node)
}

// attachment records a VolumeAttachment for the volume on the node: on the API
// server, in the informer and in the actual state.
func (h *harness) attachment(vol cache.Volume, node string, attached bool) {
	h.t.Helper()
	pv := vol.PVName
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: vaName(vol, node), UID: types.UID("uid-" + node)},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: vol.Driver, NodeName: node,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv},
		},
		Status: storagev1.VolumeAttachmentStatus{Attached: attached},
	}
	if err := h.client.Tracker().Add(va.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
		h.t.Fatal(err)
	}
	if err := h.vas.Add(va); err != nil {
		h.t.Fatal(err)
	}
	h.actual.Observe(cache.Observation{
		Volume:           vol.Name,
		Node:             node,
		VolumeAttachment: va.Name,
		UID:              va.UID,
		Attached:         attached,
		MultiAttach:      vol.MultiAttach,
	})
}

// gone records that the VolumeAttachment of the volume on the node is gone.
func (h *harness) gone(vol cache.Volume, node string) {
	h.t.Helper()
	name := vaName(vol, node)
	if err := h.client.Tracker().Delete(vaResource, "", name); err != nil && !apierrors.IsNotFound(err) {
		h.t.Fatal(err)
	}
	if obj, ok, _ := h.vas.GetByKey(name); ok {
		if err := h.vas.Delete(obj); err != nil {
			h.t.Fatal(err)
		}
	}
	h.actual.Forget(name, "")
	h.exec.ObserveVolumeAttachment(name, nil)
}

var vaResource = storagev1.SchemeGroupVersion.WithResource("volumeattachments")

func TestSyncRules(t *testing.T) {
	const (
		sameNamespaceHolder  = `Warning FailedAttachVolume Waiting for detach for volume "pv-rwo" Volume is already used by pod(s) db-a`
		otherNamespaceHolder = `Warning FailedAttachVolume Waiting for detach for volume "pv-rwo" Volume is already used by 1 pod(s) in different namespaces`
		noHolder             = `Warning FailedAttachVolume Waiting for detach for volume "pv-rwo" Volume is already exclusively attached to one node, waiting on detach before it can be attached to another node`
	)
	tests := []struct {
		name               string
		disableForceDetach bool
		// perDriver and detachOnShutdownTaint are the reconciler's settings.
		perDriver             map[string]reconciler.DriverUnmountPolicy
		detachOnShutdownTaint bool
		setup                 func(h *harness)
		vol                   cache.Volume
		// syncAt are the moments, after the start, at which Sync runs.
		syncAt      []time.Duration
		wantCalls   []call
		wantRequeue time.Duration
		wantEvents  []string
	}{
		{
			name: "not desired and not mounted: detach",
			setup: func(h *harness) {
				h.node("node-a")
				h.attachment(rwo, "node-a", true)
			},
			wantCalls: []call{detachOn("node-a")},
		},
		{
			name: "not desired and still mounted: wait the maximum",
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo))
				h.attachment(rwo, "node-a", true)
			},
			wantRequeue: maxWait,
		},
		{
			name: "still mounted after a while: requeue after the remaining wait",
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo), notReady)
				h.attachment(rwo, "node-a", true)
			},
			syncAt:      []time.Duration{0, 2 * time.Minute},
			wantRequeue: 4 * time.Minute,
		},
		{
			name: "mounted past the maximum wait on a Ready node: no detach",
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo))
				h.attachment(rwo, "node-a", true)
			},
			syncAt: []time.Duration{0, maxWait},
		},
		{
			name: "mounted past the maximum wait on a NotReady node: force detach",
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo), notReady)
				h.attachment(rwo, "node-a", true)
			},
			syncAt:    []time.Duration{0, maxWait},
			wantCalls: []call{forceDetachOn("node-a", cache.ForcedOnTimeout)},
		},
		{
			name: "mounted on a NotReady node, just before the maximum wait: no detach yet",
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo), notReady)
				h.attachment(rwo, "node-a", true)
			},
			syncAt:      []time.Duration{0, maxWait - time.Second},
			wantRequeue: time.Second,
		},
		{
			name:               "mounted past the maximum wait on a NotReady node, force detach disabled",
			disableForceDetach: true,
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo), notReady)
				h.attachment(rwo, "node-a", true)
			},
			syncAt: []time.Duration{0, maxWait, 24 * time.Hour},
		},
		{
			name:      "driver with a shorter wait of its own: force detach after it",
			perDriver: map[string]reconciler.DriverUnmountPolicy{"d": {MaxWait: 30 * time.Second}},
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo), notReady)
				h.attachment(rwo, "node-a", true)
			},
			syncAt:    []time.Duration{0, 30 * time.Second},
			wantCalls: []call{forceDetachOn("node-a", cache.ForcedOnTimeout)},
		},
		{
			name:      "driver that must never force detach: waits past the default",
			perDriver: map[string]reconciler.DriverUnmountPolicy{"d": {NeverForce: true}},
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo), notReady)
				h.attachment(rwo, "node-a", true)
			},
			syncAt: []time.Duration{0, maxWait, 24 * time.Hour},
		},
		{
			name:      "another driver's policy does not apply",
			perDriver: map[string]reconciler.DriverUnmountPolicy{"other": {NeverForce: true}},
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo), notReady)
				h.attachment(rwo, "node-a", true)
			},
			syncAt:    []time.Duration{0, maxWait},
			wantCalls: []call{forceDetachOn("node-a", cache.ForcedOnTimeout)},
		},
		{
			name:               "driver with a wait of its own, force detach disabled for all: no detach",
			disableForceDetach: true,
			perDriver:          map[string]reconciler.DriverUnmountPolicy{"d": {MaxWait: 30 * time.Second}},
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo), notReady)
				h.attachment(rwo, "node-a", true)
			},
			syncAt: []time.Duration{0, 30 * time.Second, 24 * time.Hour},
		},
		{
			name:                  "shutdown taint on a NotReady node, opted in: detach at once though mounted",
			detachOnShutdownTaint: true,
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo), shutdown, notReady)
				h.attachment(rwo, "node-a", true)
			},
			wantCalls: []call{forceDetachOn("node-a", cache.ForcedOnShutdown)},
		},
		{
			name:                  "shutdown taint on a Ready node, opted in: wait",
			detachOnShutdownTaint: true,
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo), shutdown)
				h.attachment(rwo, "node-a", true)
			},
			wantRequeue: maxWait,
		},
		{
			name: "shutdown taint on a NotReady node, not opted in: wait",
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo), shutdown, notReady)
				h.attachment(rwo, "node-a", true)
			},
			wantRequeue: maxWait,
		},
		{
			name: "out-of-service node: detach at once though mounted",
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo), outOfService)
				h.attachment(rwo, "node-a", true)
			},
			wantCalls: []call{forceDetachOn("node-a", cache.ForcedOutOfService)},
		},
		{
			name: "out-of-service NotReady node: out-of-service, no wait",
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo), outOfService, notReady)
				h.attachment(rwo, "node-a", true)
			},
			wantCalls: []call{forceDetachOn("node-a", cache.ForcedOutOfService)},
		},
		{
			name:               "out-of-service node, force detach on timeout disabled: still detached at once",
			disableForceDetach: true,
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo), outOfService)
				h.attachment(rwo, "node-a", true)
			},
			wantCalls: []call{forceDetachOn("node-a", cache.ForcedOutOfService)},
		},
		{
			name: "out-of-service node, not mounted: not forced",
			setup: func(h *harness) {
				h.node("node-a", outOfService)
				h.attachment(rwo, "node-a", true)
			},
			wantCalls: []call{detachOn("node-a")},
		},
		{
			name: "out-of-service node whose pod still exists: keep",
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo), outOfService, notReady)
				h.pod("ns", "db-a", "node-a", rwo)
				h.attachment(rwo, "node-a", true)
			},
		},
		{
			name: "deleted node whose pod is gone: waits as mounted",
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo))
				h.nodes.MarkDeleted("node-a", nil)
				h.attachment(rwo, "node-a", true)
			},
			wantRequeue: maxWait,
		},
		{
			name: "deleted node whose pod is gone: force detach after the maximum wait",
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo))
				h.nodes.MarkDeleted("node-a", nil)
				h.attachment(rwo, "node-a", true)
			},
			syncAt:    []time.Duration{0, maxWait},
			wantCalls: []call{forceDetachOn("node-a", cache.ForcedOnTimeout)},
		},
		{
			name: "deleted node whose pod still exists: keep",
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo))
				h.nodes.MarkDeleted("node-a", nil)
				h.pod("ns", "db-a", "node-a", rwo)
				h.attachment(rwo, "node-a", true)
			},
			syncAt: []time.Duration{0, maxWait, 24 * time.Hour},
		},
		{
			name: "node never seen: waits as mounted, then force detach",
			setup: func(h *harness) {
				h.attachment(rwo, "node-a", true)
			},
			syncAt:    []time.Duration{0, maxWait},
			wantCalls: []call{forceDetachOn("node-a", cache.ForcedOnTimeout)},
		},
		{
			name: "unmanaged node, not desired: no detach",
			setup: func(h *harness) {
				h.node("node-a", unmanaged)
				h.attachment(rwo, "node-a", true)
			},
		},
		{
			name: "unmanaged node, desired: no attach",
			setup: func(h *harness) {
				h.node("node-a", unmanaged)
				h.pod("ns", "db-a", "node-a", rwo)
			},
		},
		{
			name: "attachment being deleted, not desired: no new detach",
			setup: func(h *harness) {
				h.node("node-a")
				h.attachment(rwo, "node-a", true)
				h.actual.MarkDeleting(vaName(rwo, "node-a"), "")
			},
		},
		{
			name: "attachment being deleted, desired: no attach",
			setup: func(h *harness) {
				h.node("node-a")
				h.pod("ns", "db-a", "node-a", rwo)
				h.attachment(rwo, "node-a", true)
				h.actual.MarkDeleting(vaName(rwo, "node-a"), "")
			},
		},
		{
			name: "desired on a node without attachment: attach",
			setup: func(h *harness) {
				h.node("node-a")
				h.pod("ns", "db-a", "node-a", rwo)
			},
			wantCalls: []call{attachOn("node-a")},
		},
		{
			name: "desired and attached: nothing",
			setup: func(h *harness) {
				h.node("node-a")
				h.pod("ns", "db-a", "node-a", rwo)
				h.attachment(rwo, "node-a", true)
			},
		},
		{
			name: "desired, attachment not attached yet: attach (wait for it)",
			setup: func(h *harness) {
				h.node("node-a")
				h.pod("ns", "db-a", "node-a", rwo)
				h.attachment(rwo, "node-a", false)
			},
			wantCalls: []call{attachOn("node-a")},
		},
		{
			name: "desired on a node that does not exist yet: no attach",
			setup: func(h *harness) {
				h.pod("ns", "db-a", "node-a", rwo)
			},
		},
		{
			name: "desired on a deleted node without attachment: no attach",
			setup: func(h *harness) {
				h.node("node-a")
				h.nodes.MarkDeleted("node-a", nil)
				h.pod("ns", "db-a", "node-a", rwo)
			},
		},
		{
			name: "single-attach attached on A, desired on A and B: no attach, Multi-Attach naming the pod",
			setup: func(h *harness) {
				h.node("node-a")
				h.node("node-b")
				h.pod("ns", "db-a", "node-a", rwo)
				h.pod("ns", "db-b", "node-b", rwo)
				h.attachment(rwo, "node-a", true)
			},
			syncAt:     []time.Duration{0, time.Second},
			wantEvents: []string{sameNamespaceHolder},
		},
		{
			name: "single-attach held by a pod of another namespace: its name is not told",
			setup: func(h *harness) {
				h.node("node-a")
				h.node("node-b")
				h.pod("other", "secret-a", "node-a", rwo)
				h.pod("ns", "db-b", "node-b", rwo)
				h.attachment(rwo, "node-a", true)
			},
			wantEvents: []string{otherNamespaceHolder},
		},
		{
			name: "single-attach held by an attachment being deleted: no attach",
			setup: func(h *harness) {
				h.node("node-a")
				h.node("node-b")
				h.pod("ns", "db-b", "node-b", rwo)
				h.attachment(rwo, "node-a", true)
				h.actual.MarkDeleting(vaName(rwo, "node-a"), "")
			},
			wantEvents: []string{noHolder},
		},
		{
			name: "single-attach held by a not yet attached attachment: no attach",
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo))
				h.node("node-b")
				h.pod("ns", "db-b", "node-b", rwo)
				h.attachment(rwo, "node-a", false)
			},
			wantRequeue: maxWait,
			wantEvents:  []string{noHolder},
		},
		{
			name: "single-attach still mounted on A, desired on B: wait, no attach",
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo))
				h.node("node-b")
				h.pod("ns", "db-b", "node-b", rwo)
				h.attachment(rwo, "node-a", true)
			},
			wantRequeue: maxWait,
			wantEvents:  []string{noHolder},
		},
		{
			name: "multi-attach volume desired on two nodes: two attaches",
			setup: func(h *harness) {
				h.node("node-a")
				h.node("node-b")
				h.pod("ns", "web-a", "node-a", rwx)
				h.pod("ns", "web-b", "node-b", rwx)
			},
			vol:       rwx,
			wantCalls: []call{attachOn("node-a"), attachOn("node-b")},
		},
		{
			name: "multi-attach volume attached on A, desired on A and B: attach on B",
			setup: func(h *harness) {
				h.node("node-a")
				h.node("node-b")
				h.pod("ns", "web-a", "node-a", rwx)
				h.pod("ns", "web-b", "node-b", rwx)
				h.attachment(rwx, "node-a", true)
			},
			vol:       rwx,
			wantCalls: []call{attachOn("node-b")},
		},
		{
			name: "multi-attach volume moving from A to B: detach A and attach B together",
			setup: func(h *harness) {
				h.node("node-a")
				h.node("node-b")
				h.pod("ns", "web-b", "node-b", rwx)
				h.attachment(rwx, "node-a", true)
			},
			vol:       rwx,
			wantCalls: []call{detachOn("node-a"), attachOn("node-b")},
		},
		{
			name: "multi-attach volume moving from B to A: the detach from B starts before the attach to A",
			setup: func(h *harness) {
				h.node("node-a")
				h.node("node-b")
				h.pod("ns", "web-a", "node-a", rwx)
				h.attachment(rwx, "node-b", true)
			},
			vol:       rwx,
			wantCalls: []call{detachOn("node-b"), attachOn("node-a")},
		},
		{
			name: "multi-attach volume on A and B, desired nowhere: both detaches at once",
			setup: func(h *harness) {
				h.node("node-a")
				h.node("node-b")
				h.attachment(rwx, "node-a", true)
				h.attachment(rwx, "node-b", true)
			},
			vol:       rwx,
			wantCalls: []call{detachOn("node-a"), detachOn("node-b")},
		},
		{
			name: "single-attach volume on A and B, desired nowhere: one detach at a time",
			setup: func(h *harness) {
				h.node("node-a")
				h.node("node-b")
				h.attachment(rwo, "node-a", true)
				h.attachment(rwo, "node-b", true)
			},
			syncAt:    []time.Duration{0, time.Second},
			wantCalls: []call{detachOn("node-a")},
		},
		{
			// Once A's attach has sent its create, B's pod learns why it waits.
			name: "single-attach desired on two nodes, no attachment: exactly one attach",
			setup: func(h *harness) {
				h.node("node-a")
				h.node("node-b")
				h.pod("ns", "db-a", "node-a", rwo)
				h.pod("ns", "db-b", "node-b", rwo)
			},
			syncAt:     []time.Duration{0, time.Second},
			wantCalls:  []call{attachOn("node-a")},
			wantEvents: []string{sameNamespaceHolder},
		},
		{
			// B's pod learns why it waits even while A's detach runs, as the
			// decision Explain reads says.
			name: "detach first: attached on A, desired on B: detach A, no attach on B, B's pod told it waits",
			setup: func(h *harness) {
				h.node("node-a")
				h.node("node-b")
				h.pod("ns", "db-b", "node-b", rwo)
				h.attachment(rwo, "node-a", true)
			},
			wantCalls:  []call{detachOn("node-a")},
			wantEvents: []string{noHolder},
		},
		{
			name: "unresolved VolumeAttachment holding the PV on A blocks attach on B",
			setup: func(h *harness) {
				h.node("node-a")
				h.node("node-b")
				h.pod("ns", "db-b", "node-b", rwo)
				h.actual.ObserveUnresolved(cache.UnresolvedAttachment{VolumeAttachment: "csi-unknown", PVName: "pv-rwo", Node: "node-a"})
			},
			wantEvents: []string{noHolder},
		},
		{
			name: "unresolved VolumeAttachment of another PV does not block",
			setup: func(h *harness) {
				h.node("node-a")
				h.node("node-b")
				h.pod("ns", "db-b", "node-b", rwo)
				h.actual.ObserveUnresolved(cache.UnresolvedAttachment{VolumeAttachment: "csi-unknown", PVName: "pv-other", Node: "node-a"})
			},
			wantCalls: []call{attachOn("node-b")},
		},
		{
			name: "unresolved VolumeAttachment on the same node does not block",
			setup: func(h *harness) {
				h.node("node-b")
				h.pod("ns", "db-b", "node-b", rwo)
				h.actual.ObserveUnresolved(cache.UnresolvedAttachment{VolumeAttachment: "csi-unknown", PVName: "pv-rwo", Node: "node-b"})
			},
			wantCalls: []call{attachOn("node-b")},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarnessWith(t, harnessOpts{
				disableForceDetach: tc.disableForceDetach, perDriver: tc.perDriver, detachOnShutdownTaint: tc.detachOnShutdownTaint,
			})
			tc.setup(h)
			vol := tc.vol
			if vol.Name == "" {
				vol = rwo
			}
			syncAt := tc.syncAt
			if len(syncAt) == 0 {
				syncAt = []time.Duration{0}
			}
			start := h.now
			var requeue time.Duration
			for i, at := range syncAt {
				if i > 0 {
					h.waitAttachesHold(vol)
				}
				h.now = start.Add(at)
				requeue = h.sync(vol)
			}
			if got := h.exec.started(); !slices.Equal(got, tc.wantCalls) {
				t.Errorf("operations started = %v, want %v", got, tc.wantCalls)
			}
			if requeue != tc.wantRequeue {
				t.Errorf("requeue after %v, want %v", requeue, tc.wantRequeue)
			}
			if got := h.events(); !slices.Equal(got, tc.wantEvents) {
				t.Errorf("events = %q, want %q", got, tc.wantEvents)
			}
		})
	}
}

func TestMultiAttachEventOncePerWait(t *testing.T) {
	h := newHarness(t, false)
	h.node("node-a")
	h.node("node-b")
	h.pod("ns", "db-a", "node-a", rwo)
	h.pod("ns", "db-b1", "node-b", rwo)
	h.pod("ns", "db-b2", "node-b", rwo)
	h.attachment(rwo, "node-a", true)
	ctx := h.ctx
	want := `Warning FailedAttachVolume Waiting for detach for volume "pv-rwo" Volume is already used by pod(s) db-a`

	h.r.Sync(ctx, rwo.Name)
	if got := h.events(); !slices.Equal(got, []string{want, want}) {
		t.Fatalf("first Sync events = %q, want one for each of the two waiting pods", got)
	}
	h.r.Sync(ctx, rwo.Name)
	if got := h.events(); len(got) != 0 {
		t.Fatalf("second Sync events = %q, want none", got)
	}

	// The volume moves to B: the wait is over once it is attached there.
	h.desired.DeletePod("ns/db-a")
	h.gone(rwo, "node-a")
	h.attachment(rwo, "node-b", true)
	h.r.Sync(ctx, rwo.Name)
	if got := h.events(); len(got) != 0 {
		t.Fatalf("events once attached on B = %q, want none", got)
	}

	// A new holder elsewhere starts a new wait, reported again.
	h.gone(rwo, "node-b")
	h.attachment(rwo, "node-a", true)
	h.pod("ns", "db-a", "node-a", rwo)
	h.r.Sync(ctx, rwo.Name)
	if got := h.events(); !slices.Equal(got, []string{want, want}) {
		t.Errorf("events of the new wait = %q, want one for each waiting pod", got)
	}
}

func TestSyncStartErrors(t *testing.T) {
	tests := []struct {
		name        string
		err         error
		wantRequeue time.Duration
	}{
		{"backing off", &operationexecutor.BackoffError{Remaining: 1500 * time.Millisecond}, 1500 * time.Millisecond},
		{"conflicting operation", operationexecutor.ErrPending, 0},
		{"wrapped conflicting operation", fmt.Errorf("start: %w", operationexecutor.ErrPending), 0},
		{"other error", errors.New("boom"), time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, false)
			h.node("node-a")
			h.pod("ns", "db-a", "node-a", rwo)
			h.exec.startErr = tc.err
			if got := h.sync(rwo); got != tc.wantRequeue {
				t.Errorf("attach: requeue after %v, want %v", got, tc.wantRequeue)
			}

			h = newHarness(t, false)
			h.node("node-a")
			h.attachment(rwo, "node-a", true)
			h.exec.startErr = tc.err
			if got := h.sync(rwo); got != tc.wantRequeue {
				t.Errorf("detach: requeue after %v, want %v", got, tc.wantRequeue)
			}
		})
	}
}

func TestSyncEarliestRequeue(t *testing.T) {
	h := newHarness(t, false)
	h.node("node-a", mounting(rwx))
	h.node("node-b", mounting(rwx))
	h.attachment(rwx, "node-a", true)
	h.attachment(rwx, "node-b", true)
	ctx := h.ctx
	h.r.Sync(ctx, rwx.Name)
	h.now = h.now.Add(time.Minute)
	h.actual.EndUnmountWait(rwx.Name, "node-b")
	if got := h.r.Sync(ctx, rwx.Name); got != maxWait-time.Minute {
		t.Errorf("requeue after %v, want the earlier of the two waits, %v", got, maxWait-time.Minute)
	}
}

func TestDesiredAgainEndsTheWait(t *testing.T) {
	h := newHarness(t, false)
	h.node("node-a", mounting(rwo), notReady)
	h.attachment(rwo, "node-a", true)
	ctx := h.ctx
	h.r.Sync(ctx, rwo.Name)
	h.now = h.now.Add(5 * time.Minute)
	h.pod("ns", "db-a", "node-a", rwo)
	h.r.Sync(ctx, rwo.Name)
	h.desired.DeletePod("ns/db-a")
	h.now = h.now.Add(2 * time.Minute)
	if got := h.r.Sync(ctx, rwo.Name); got != maxWait {
		t.Errorf("requeue after %v, want a new full wait %v", got, maxWait)
	}
	if got := h.exec.started(); len(got) != 0 {
		t.Errorf("operations started = %v, want none", got)
	}
}

// TestReleaseQueuesTheVolumesThatMayNeedAnOperationFirst: at start-up every
// volume is enqueued while held; on release the volumes that a node needs
// without a VolumeAttachment, or that a node has one for without needing them,
// come before the many that only need a look.
func TestReleaseQueuesTheVolumesThatMayNeedAnOperationFirst(t *testing.T) {
	h := newHarness(t, false)
	h.node("node-a")
	h.node("node-b")
	vol := func(name string) cache.Volume {
		return cache.Volume{Name: volumename.CSI("d", name), Driver: "d", Handle: name, PVName: "pv-" + name, DisplayName: "pv-" + name}
	}
	var settled []cache.Volume
	for i := range 50 {
		v := vol(fmt.Sprintf("settled-%d", i))
		h.pod("default", v.Handle, "node-a", v)
		h.attachment(v, "node-a", true)
		settled = append(settled, v)
	}
	toAttach, toDetach, moved := vol("to-attach"), vol("to-detach"), vol("moved")
	h.pod("default", "to-attach", "node-a", toAttach)
	h.attachment(toDetach, "node-b", true)
	h.pod("default", "moved", "node-b", moved)
	h.attachment(moved, "node-a", true)

	h.r.Hold()
	for _, v := range settled {
		h.r.Enqueue(v.Name)
	}
	for _, v := range []cache.Volume{toAttach, toDetach, moved} {
		h.r.Enqueue(v.Name)
	}
	if n := h.r.QueueLength(); n != 0 {
		t.Fatalf("%d volumes queued while held, want none", n)
	}
	h.r.Release()
	queued := h.r.Queued()
	if len(queued) != len(settled)+3 {
		t.Fatalf("%d volumes queued on release, want %d", len(queued), len(settled)+3)
	}
	want := []volumename.UniqueName{toAttach.Name, toDetach.Name, moved.Name}
	if first := queued[:3]; !sameSet(first, want) {
		t.Errorf("first volumes queued %q, want %q", first, want)
	}
	h.r.Enqueue(settled[0].Name)
	if n := h.r.QueueLength(); n != 1 {
		t.Errorf("%d volumes queued after release, want the one enqueued", n)
	}
}

func sameSet(a, b []volumename.UniqueName) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(v volumename.UniqueName) bool { return !slices.Contains(b, v) })
}
