package reconciler_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// The tests in this file run the reconciler with the real executor on a fake API
// server, for what the two decide together.

// onNode returns what the actual state holds of the volume on the node.
func (h *harness) onNode(vol cache.Volume, node string) cache.OnNode {
	h.t.Helper()
	on, ok := h.actual.Get(vol.Name, node)
	if !ok {
		h.t.Fatalf("nothing recorded of %s on %s", vol.Name, node)
	}
	return on
}

// exists tells whether the API server still has the VolumeAttachment.
func (h *harness) exists(vol cache.Volume, node string) bool {
	_, err := h.client.Tracker().Get(vaResource, "", vaName(vol, node))
	return err == nil
}

// waitFor polls cond until it holds.
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestHiddenVolumeWantedAgainIsReportedAgain guards against "a volume hidden from
// node status during rebuild is never reported again if a pod on that node wants
// it": an attached volume a pod on the node wants, hidden while no operation
// runs, is listed again and the node's status is written.
func TestHiddenVolumeWantedAgainIsReportedAgain(t *testing.T) {
	tests := []struct {
		name   string
		vol    cache.Volume
		hidden bool
		// attached: the VolumeAttachment reports the volume attached.
		attached     bool
		wantReported bool
		wantEnqueued []string
		wantCalls    []call
	}{
		{name: "hidden, attached, wanted, nothing running", vol: rwo, hidden: true, attached: true, wantReported: true, wantEnqueued: []string{"node-a"}},
		{name: "multi-attach: hidden, attached, wanted, nothing running", vol: rwx, hidden: true, attached: true, wantReported: true, wantEnqueued: []string{"node-a"}},
		{name: "not hidden: nothing to write", vol: rwo, attached: true, wantReported: true},
		{name: "hidden, not attached yet: the attach goes on, nothing to list", vol: rwo, hidden: true, wantCalls: []call{attachOn("node-a")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, false)
			h.node("node-a")
			h.pod("ns", "db-a", "node-a", tc.vol)
			h.attachment(tc.vol, "node-a", tc.attached)
			// As the rebuild leaves a volume node status did not list.
			h.actual.SetHiddenFromNodeStatus(tc.vol.Name, "node-a", tc.hidden)

			h.sync(tc.vol)
			on := h.onNode(tc.vol, "node-a")
			if on.Reported() != tc.wantReported {
				t.Errorf("reported = %v, want %v (%+v)", on.Reported(), tc.wantReported, on)
			}
			if got := h.status.enqueuedNodes(); !slices.Equal(got, tc.wantEnqueued) {
				t.Errorf("node status enqueued %q, want %q", got, tc.wantEnqueued)
			}
			if got := h.exec.started(); !slices.Equal(got, tc.wantCalls) {
				t.Errorf("operations started = %v, want %v", got, tc.wantCalls)
			}
			// Once listed, later passes write nothing more.
			h.sync(tc.vol)
			if got := h.status.enqueuedNodes(); !slices.Equal(got, tc.wantEnqueued) {
				t.Errorf("node status enqueued %q after a second pass, want %q", got, tc.wantEnqueued)
			}
		})
	}
}

// TestHiddenVolumeIsLeftToTheRunningDetach: while the detach that hid the volume
// runs, the reconciler leaves it hidden; the detach, called off because the pod
// came back, lists it again itself.
func TestHiddenVolumeIsLeftToTheRunningDetach(t *testing.T) {
	h := newHarness(t, false)
	h.node("node-a")
	h.attachment(rwo, "node-a", true)
	gate := make(chan struct{})
	h.status.gate = gate

	h.sync(rwo)
	if got, want := h.exec.started(), []call{detachOn("node-a")}; !slices.Equal(got, want) {
		t.Fatalf("operations started = %v, want %v", got, want)
	}
	h.waitFor("the detach to hide the volume", func() bool { return h.onNode(rwo, "node-a").HiddenFromNodeStatus })

	// The pod comes back while the detach waits for node status.
	h.pod("ns", "db-a", "node-a", rwo)
	h.sync(rwo)
	if on := h.onNode(rwo, "node-a"); on.Reported() {
		t.Errorf("the reconciler listed the volume while the detach runs: %+v", on)
	}
	if got := h.status.enqueuedNodes(); len(got) != 0 {
		t.Errorf("node status enqueued %q while the detach runs, want nothing", got)
	}

	close(gate)
	h.waitIdle()
	if !h.exists(rwo, "node-a") {
		t.Error("the VolumeAttachment a pod wants again was deleted")
	}
	if on := h.onNode(rwo, "node-a"); !on.Reported() {
		t.Errorf("after the called-off detach %+v, want the volume listed again", on)
	}
	if got := h.status.enqueuedNodes(); !slices.Equal(got, []string{"node-a"}) {
		t.Errorf("node status enqueued %q, want [node-a]", got)
	}
	h.sync(rwo)
	if got := h.status.enqueuedNodes(); !slices.Equal(got, []string{"node-a"}) {
		t.Errorf("node status enqueued %q after one more pass, want [node-a] only", got)
	}
}

// TestMultiAttachEventOnceForACreateInFlight: the executor refuses a single-attach
// volume held only by a create that got no answer (it may exist), and the pods
// are told once per wait.
func TestMultiAttachEventOnceForACreateInFlight(t *testing.T) {
	const noHolder = `Warning FailedAttachVolume Waiting for detach for volume "pv-rwo" Volume is already exclusively attached to one node, waiting on detach before it can be attached to another node`
	h := newHarness(t, false)
	h.node("node-a", mounting(rwo))
	h.node("node-b")
	h.pod("ns", "db-b", "node-b", rwo)
	// A create sent to node-a whose answer never came: it may exist.
	h.actual.BeginCreate(rwo.Name, "node-a", vaName(rwo, "node-a"), false)

	for i := range 3 {
		h.sync(rwo)
		want := []string(nil)
		if i == 0 {
			want = []string{noHolder}
		}
		if got := h.events(); !slices.Equal(got, want) {
			t.Errorf("pass %d: events = %q, want %q", i, got, want)
		}
	}
	if got := testutil.ToFloat64(h.metrics.WaitsForDetach); got != 1 {
		t.Errorf("multi-attach refusals = %v, want 1", got)
	}
	if got := h.exec.started(); len(got) != 0 {
		t.Errorf("operations started = %v, want none: node-a may hold the volume and still mounts it", got)
	}
}

// TestStaleNodeDoesNotForceTheDetach guards against "force detach on a stale
// node": the informer's node carries the out-of-service taint (or is NotReady past
// the wait), the API server's node no longer does and kubelet reports the volume
// in use; the reconciler asks for the forced detach, and the executor, deciding on
// the API server's node, calls it off and lists the volume again.
func TestStaleNodeDoesNotForceTheDetach(t *testing.T) {
	tests := []struct {
		name      string
		informer  []nodeOpt
		fresh     func(n *v1.Node)
		syncAt    []time.Duration
		wantForce cache.ForceRule
	}{
		{
			name:      "out-of-service taint removed",
			informer:  []nodeOpt{mounting(rwo), outOfService, notReady},
			fresh:     func(n *v1.Node) { n.Spec.Taints = nil },
			syncAt:    []time.Duration{0},
			wantForce: cache.ForcedOutOfService,
		},
		{
			name:     "NotReady node Ready again",
			informer: []nodeOpt{mounting(rwo), notReady},
			fresh: func(n *v1.Node) {
				n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}
			},
			syncAt:    []time.Duration{0, maxWait},
			wantForce: cache.ForcedOnTimeout,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, false)
			h.node("node-a", tc.informer...)
			h.attachment(rwo, "node-a", true)
			fresh := nodeObject(h.nodes.Get("node-a"))
			tc.fresh(fresh)
			h.status.fresh["node-a"] = fresh

			start := h.now
			for _, at := range tc.syncAt {
				h.now = start.Add(at)
				h.sync(rwo)
			}
			if got, want := h.exec.started(), []call{forceDetachOn("node-a", tc.wantForce)}; !slices.Equal(got, want) {
				t.Fatalf("operations started = %v, want %v", got, want)
			}
			h.waitIdle()
			if !h.exists(rwo, "node-a") {
				t.Error("the VolumeAttachment was deleted on the strength of a stale node")
			}
			if on := h.onNode(rwo, "node-a"); !on.Reported() || on.Deleting() {
				t.Errorf("after the called-off detach %+v, want listed again, not deleting", on)
			}
			if got := h.status.enqueuedNodes(); !slices.Equal(got, []string{"node-a"}) {
				t.Errorf("node status enqueued %q, want [node-a]", got)
			}
		})
	}
}

// TestForcedDetachDeletesOnTheNodeTheAPIServerConfirms: the same forced detaches
// go ahead when the API server's node agrees.
func TestForcedDetachDeletesOnTheNodeTheAPIServerConfirms(t *testing.T) {
	for _, tc := range []struct {
		name      string
		informer  []nodeOpt
		syncAt    []time.Duration
		wantForce cache.ForceRule
	}{
		{"out-of-service", []nodeOpt{mounting(rwo), outOfService}, []time.Duration{0}, cache.ForcedOutOfService},
		{"NotReady past the maximum wait", []nodeOpt{mounting(rwo), notReady}, []time.Duration{0, maxWait}, cache.ForcedOnTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, false)
			h.node("node-a", tc.informer...)
			h.attachment(rwo, "node-a", true)
			start := h.now
			for _, at := range tc.syncAt {
				h.now = start.Add(at)
				h.sync(rwo)
			}
			if got, want := h.exec.started(), []call{forceDetachOn("node-a", tc.wantForce)}; !slices.Equal(got, want) {
				t.Fatalf("operations started = %v, want %v", got, want)
			}
			h.waitFor("the delete", func() bool { return h.onNode(rwo, "node-a").Deleting() })
			if h.exists(rwo, "node-a") {
				t.Error("the VolumeAttachment was not deleted")
			}
			if on := h.onNode(rwo, "node-a"); on.Reported() {
				t.Errorf("during the detach %+v, want it out of node status", on)
			}
			h.gone(rwo, "node-a")
			h.waitIdle()
		})
	}
}

// TestUnsettledDeleteKeepsTheVolumeHiddenWhenAPodWantsItAgain: the detach sent
// its delete, the API server carried it out but the answer was lost, and the read
// meant to settle it failed too; the executor rightly keeps the volume out of node
// status, since the VolumeAttachment may be on its way out. A pod then wants the
// volume on the same node again. The record is still attached and not marked
// deleting (the outcome is unknown), so reportAgain lists the volume in node
// status again, and kubelet may mount a volume the external-attacher is about to
// detach. The volume must stay hidden until the informer or a read settles the
// delete.
func TestUnsettledDeleteKeepsTheVolumeHiddenWhenAPodWantsItAgain(t *testing.T) {
	h := newHarnessWith(t, harnessOpts{timeout: 300 * time.Millisecond})
	lost := apierrors.NewInternalError(errors.New("etcd leader changed"))
	h.client.PrependReactor("delete", "volumeattachments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if err := h.client.Tracker().Delete(vaResource, "", a.(clienttesting.DeleteAction).GetName()); err != nil {
			t.Error(err)
		}
		return true, nil, lost
	})
	h.client.PrependReactor("get", "volumeattachments", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, lost
	})
	h.node("node-a")
	h.attachment(rwo, "node-a", true)

	h.sync(rwo)
	h.waitIdle()
	if h.exists(rwo, "node-a") {
		t.Fatal("setup: the delete did not reach the API server")
	}
	on := h.onNode(rwo, "node-a")
	if !on.HiddenFromNodeStatus || on.Reported() {
		t.Fatalf("setup: after a delete of unknown outcome %+v, want the volume hidden", on)
	}

	// A pod on the same node wants the volume again; the informer has said
	// nothing yet.
	h.pod("ns", "db-a", "node-a", rwo)
	h.sync(rwo)
	if on := h.onNode(rwo, "node-a"); !on.HiddenFromNodeStatus || on.Reported() {
		t.Errorf("after a pass with the pod back: %+v; want the volume still hidden, its VolumeAttachment may be being deleted", on)
	}
	if got := h.status.enqueuedNodes(); len(got) != 0 {
		t.Errorf("node status enqueued %q, want nothing: the volume must not be listed again", got)
	}
}

// copyOf records, in the actual state, a VolumeAttachment another tool made of
// the volume on the node under a name of its own.
func (h *harness) copyOf(vol cache.Volume, node string, attached bool) {
	name := "copy-" + vaName(vol, node)
	h.actual.Observe(cache.Observation{
		Volume: vol.Name, Node: node, VolumeAttachment: name, UID: types.UID("uid-" + name),
		Attached: attached, MultiAttach: vol.MultiAttach,
	})
}

// TestAnotherToolsCopyDoesNotStandForTheControllersAttachment: kubelet waits for
// the VolumeAttachment named for the volume's handle, driver and node, as
// kube-controller-manager creates it and checks it (csiAttacher.WaitForAttach
// and VolumesAreAttached in v1.37.1 look that name up, nothing else). A copy
// another tool made under another name holds the volume on the node, but a pod
// there cannot start on it: the controller still creates its own. Before, a copy
// reported attached counted as the attachment, and the pod waited for good
// (simulation seeds 1057, 2393, 22253 and others with copies).
func TestAnotherToolsCopyDoesNotStandForTheControllersAttachment(t *testing.T) {
	tests := []struct {
		name string
		vol  cache.Volume
		// own: the controller's own object exists (attached), ownDeleting: and is
		// being deleted.
		own, ownDeleting bool
		wantCalls        []call
		wantCreated      bool
	}{
		{name: "single-attach: a copy alone is attached: attach", vol: rwo, wantCalls: []call{attachOn("node-a")}, wantCreated: true},
		{name: "multi-attach: a copy alone is attached: attach", vol: rwx, wantCalls: []call{attachOn("node-a")}, wantCreated: true},
		{name: "the controller's own is attached too: nothing to do", vol: rwo, own: true},
		{name: "the controller's own is being deleted: wait for it to go first", vol: rwo, own: true, ownDeleting: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, false)
			h.node("node-a")
			h.pod("ns", "db-a", "node-a", tc.vol)
			h.copyOf(tc.vol, "node-a", true)
			if tc.own {
				h.attachment(tc.vol, "node-a", true)
				if tc.ownDeleting {
					h.actual.MarkDeleting(vaName(tc.vol, "node-a"), "")
				}
			}

			h.sync(tc.vol)
			if got := h.exec.started(); !slices.Equal(got, tc.wantCalls) {
				t.Errorf("operations started = %v, want %v", got, tc.wantCalls)
			}
			if tc.wantCreated {
				h.waitFor("the controller's own VolumeAttachment to be created", func() bool { return h.exists(tc.vol, "node-a") })
			}
		})
	}
}
