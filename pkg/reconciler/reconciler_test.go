package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/csivolume"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/operationexecutor"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/podevents"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/reconciler"
)

const maxWait = 6 * time.Minute

// call is one Attach or Detach the reconciler asked for.
type call struct {
	op   string
	node string
}

func (c call) String() string { return c.op + "@" + c.node }

func attachOn(node string) call { return call{"attach", node} }
func detachOn(node string) call { return call{"detach", node} }

// fakeExecutor records the operations asked for and holds the locks the real
// executor would: the whole volume for a single-attach volume, the node otherwise.
type fakeExecutor struct {
	calls   []call
	running map[csivolume.UniqueName]map[string]struct{}
	// startErr, when set, is returned instead of starting an operation.
	startErr error
}

func newFakeExecutor() *fakeExecutor {
	return &fakeExecutor{running: make(map[csivolume.UniqueName]map[string]struct{})}
}

func (f *fakeExecutor) start(op string, vol csivolume.UniqueName, node string, multiAttach bool) error {
	f.calls = append(f.calls, call{op, node})
	if f.startErr != nil {
		return f.startErr
	}
	lock := ""
	if multiAttach {
		lock = node
	}
	held := f.running[vol]
	_, whole := held[""]
	_, same := held[lock]
	if whole || same || (lock == "" && len(held) > 0) {
		return operationexecutor.ErrPending
	}
	if held == nil {
		held = make(map[string]struct{})
		f.running[vol] = held
	}
	held[lock] = struct{}{}
	return nil
}

func (f *fakeExecutor) Attach(_ context.Context, vol cache.Volume, node string, _ []cache.PodRef) error {
	return f.start("attach", vol.Name, node, vol.MultiAttach)
}

func (f *fakeExecutor) Detach(_ context.Context, att cache.Attachment, multiAttach, _ bool) error {
	return f.start("detach", att.Volume, att.Node, multiAttach)
}

func (f *fakeExecutor) IsRunning(vol csivolume.UniqueName, node string) bool {
	_, whole := f.running[vol][""]
	_, own := f.running[vol][node]
	return whole || own
}

func (f *fakeExecutor) AnyRunning(vol csivolume.UniqueName) bool { return len(f.running[vol]) > 0 }

func (f *fakeExecutor) AttachObserved(cache.Volume, string, []cache.PodRef) {}

// harness is a reconciler on real cache objects with a fake executor and clock.
type harness struct {
	desired  *cache.DesiredState
	actual   *cache.ActualState
	nodes    *cache.Nodes
	exec     *fakeExecutor
	recorder *record.FakeRecorder
	now      time.Time
	r        *reconciler.Reconciler
}

func newHarness(disableForceDetach bool) *harness {
	h := &harness{
		desired:  cache.NewDesiredState(),
		actual:   cache.NewActualState(),
		nodes:    cache.NewNodes(),
		exec:     newFakeExecutor(),
		recorder: record.NewFakeRecorder(100),
		now:      time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC),
	}
	h.r = reconciler.New(reconciler.Config{
		Desired:                     h.desired,
		Actual:                      h.actual,
		Nodes:                       h.nodes,
		Executor:                    h.exec,
		Events:                      podevents.NewEmitter(h.recorder),
		Metrics:                     metrics.New(),
		MaxWaitForUnmount:           maxWait,
		DisableForceDetachOnTimeout: disableForceDetach,
		Now:                         func() time.Time { return h.now },
	})
	return h
}

func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

var (
	rwo = cache.Volume{
		Name: csivolume.NewUniqueName("d", "h-rwo"), Driver: "d", Handle: "h-rwo",
		PVName: "pv-rwo", DisplayName: "pv-rwo",
	}
	rwx = cache.Volume{
		Name: csivolume.NewUniqueName("d", "h-rwx"), Driver: "d", Handle: "h-rwx",
		PVName: "pv-rwx", DisplayName: "pv-rwx", MultiAttach: true,
	}
)

// nodeOpt changes a healthy managed node.
type nodeOpt func(*cache.Node)

func notReady(n *cache.Node)     { n.Ready = false }
func unmanaged(n *cache.Node)    { n.Managed = false }
func outOfService(n *cache.Node) { n.OutOfService = true }
func mounting(vols ...cache.Volume) nodeOpt {
	return func(n *cache.Node) {
		for _, v := range vols {
			n.InUse[v.Name] = struct{}{}
		}
	}
}

func (h *harness) node(name string, opts ...nodeOpt) {
	n := cache.Node{Name: name, Exists: true, Known: true, Managed: true, Ready: true, InUse: map[csivolume.UniqueName]struct{}{}}
	for _, o := range opts {
		o(&n)
	}
	h.nodes.Set(n)
}

func (h *harness) pod(namespace, name, node string, vol cache.Volume) {
	h.desired.SetPod(cache.PodRef{Namespace: namespace, Name: name, UID: types.UID(namespace + "-" + name)}, node, []cache.Volume{vol})
}

// attachment records a VolumeAttachment for the volume on the node.
func (h *harness) attachment(vol cache.Volume, node string, attached bool) {
	h.actual.Observe(cache.Observation{
		Volume:           vol.Name,
		Node:             node,
		VolumeAttachment: csivolume.AttachmentName(vol.Handle, vol.Driver, node),
		UID:              types.UID("uid-" + node),
		Attached:         attached,
	})
}

func TestSyncRules(t *testing.T) {
	const (
		sameNamespaceHolder  = `Warning FailedAttachVolume Multi-Attach error for volume "pv-rwo" Volume is already used by pod(s) db-a`
		otherNamespaceHolder = `Warning FailedAttachVolume Multi-Attach error for volume "pv-rwo" Volume is already used by 1 pod(s) in different namespaces`
		noHolder             = `Warning FailedAttachVolume Multi-Attach error for volume "pv-rwo" Volume is already exclusively attached to one node and can't be attached to another`
	)
	tests := []struct {
		name               string
		disableForceDetach bool
		setup              func(h *harness)
		vol                cache.Volume
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
			wantCalls: []call{detachOn("node-a")},
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
			name: "out-of-service node: detach at once though mounted",
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo), outOfService)
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
				h.nodes.MarkDeleted("node-a")
				h.attachment(rwo, "node-a", true)
			},
			wantRequeue: maxWait,
		},
		{
			name: "deleted node whose pod is gone: force detach after the maximum wait",
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo))
				h.nodes.MarkDeleted("node-a")
				h.attachment(rwo, "node-a", true)
			},
			syncAt:    []time.Duration{0, maxWait},
			wantCalls: []call{detachOn("node-a")},
		},
		{
			name: "deleted node whose pod still exists: keep",
			setup: func(h *harness) {
				h.node("node-a", mounting(rwo))
				h.nodes.MarkDeleted("node-a")
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
			wantCalls: []call{detachOn("node-a")},
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
				h.actual.MarkDeleting(rwo.Name, "node-a")
			},
		},
		{
			name: "attachment being deleted, desired: no attach",
			setup: func(h *harness) {
				h.node("node-a")
				h.pod("ns", "db-a", "node-a", rwo)
				h.attachment(rwo, "node-a", true)
				h.actual.MarkDeleting(rwo.Name, "node-a")
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
				h.nodes.MarkDeleted("node-a")
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
				h.actual.MarkDeleting(rwo.Name, "node-a")
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
			name: "single-attach desired on two nodes, no attachment: exactly one attach",
			setup: func(h *harness) {
				h.node("node-a")
				h.node("node-b")
				h.pod("ns", "db-a", "node-a", rwo)
				h.pod("ns", "db-b", "node-b", rwo)
			},
			syncAt:    []time.Duration{0, time.Second},
			wantCalls: []call{attachOn("node-a")},
		},
		{
			name: "detach first: attached on A, desired on B: detach A, no attach on B",
			setup: func(h *harness) {
				h.node("node-a")
				h.node("node-b")
				h.pod("ns", "db-b", "node-b", rwo)
				h.attachment(rwo, "node-a", true)
			},
			wantCalls: []call{detachOn("node-a")},
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
			h := newHarness(tc.disableForceDetach)
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
			for _, at := range syncAt {
				h.now = start.Add(at)
				requeue = h.r.Sync(context.Background(), vol.Name)
			}
			if !slices.Equal(h.exec.calls, tc.wantCalls) {
				t.Errorf("calls = %v, want %v", h.exec.calls, tc.wantCalls)
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
	h := newHarness(false)
	h.node("node-a")
	h.node("node-b")
	h.pod("ns", "db-a", "node-a", rwo)
	h.pod("ns", "db-b1", "node-b", rwo)
	h.pod("ns", "db-b2", "node-b", rwo)
	h.attachment(rwo, "node-a", true)
	ctx := context.Background()
	want := `Warning FailedAttachVolume Multi-Attach error for volume "pv-rwo" Volume is already used by pod(s) db-a`

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
	h.actual.Forget(csivolume.AttachmentName(rwo.Handle, rwo.Driver, "node-a"))
	h.attachment(rwo, "node-b", true)
	h.r.Sync(ctx, rwo.Name)
	if got := h.events(); len(got) != 0 {
		t.Fatalf("events once attached on B = %q, want none", got)
	}

	// A new holder elsewhere starts a new wait, reported again.
	h.actual.Forget(csivolume.AttachmentName(rwo.Handle, rwo.Driver, "node-b"))
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
			h := newHarness(false)
			h.node("node-a")
			h.pod("ns", "db-a", "node-a", rwo)
			h.exec.startErr = tc.err
			if got := h.r.Sync(context.Background(), rwo.Name); got != tc.wantRequeue {
				t.Errorf("attach: requeue after %v, want %v", got, tc.wantRequeue)
			}

			h = newHarness(false)
			h.node("node-a")
			h.attachment(rwo, "node-a", true)
			h.exec.startErr = tc.err
			if got := h.r.Sync(context.Background(), rwo.Name); got != tc.wantRequeue {
				t.Errorf("detach: requeue after %v, want %v", got, tc.wantRequeue)
			}
		})
	}
}

func TestSyncEarliestRequeue(t *testing.T) {
	h := newHarness(false)
	h.node("node-a", mounting(rwx))
	h.node("node-b", mounting(rwx))
	h.attachment(rwx, "node-a", true)
	h.attachment(rwx, "node-b", true)
	ctx := context.Background()
	h.r.Sync(ctx, rwx.Name)
	h.now = h.now.Add(time.Minute)
	h.actual.ClearDetachWanted(rwx.Name, "node-b")
	if got := h.r.Sync(ctx, rwx.Name); got != maxWait-time.Minute {
		t.Errorf("requeue after %v, want the earlier of the two waits, %v", got, maxWait-time.Minute)
	}
}

func TestDesiredAgainEndsTheWait(t *testing.T) {
	h := newHarness(false)
	h.node("node-a", mounting(rwo), notReady)
	h.attachment(rwo, "node-a", true)
	ctx := context.Background()
	h.r.Sync(ctx, rwo.Name)
	h.now = h.now.Add(5 * time.Minute)
	h.pod("ns", "db-a", "node-a", rwo)
	h.r.Sync(ctx, rwo.Name)
	h.desired.DeletePod("ns/db-a")
	h.now = h.now.Add(2 * time.Minute)
	if got := h.r.Sync(ctx, rwo.Name); got != maxWait {
		t.Errorf("requeue after %v, want a new full wait %v", got, maxWait)
	}
	if len(h.exec.calls) != 0 {
		t.Errorf("calls = %v, want none", h.exec.calls)
	}
}
