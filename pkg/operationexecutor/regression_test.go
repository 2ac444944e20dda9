package operationexecutor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clienttesting "k8s.io/client-go/testing"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// The tests in this file cover the executor's decisions that the lead rewrote in
// 485d7bd: the holder check under the lock, writes of unknown outcome, the node
// the API server returns deciding a detach, backoff per kind of operation, the
// lock an RWX detach takes, and shutdown.

const otherNode = "node-2"

// testRWX is testPV as a volume several nodes may attach at once.
var testRWX = func() cache.Volume {
	v := testPV
	v.MultiAttach = true
	return v
}()

// vaName is the VolumeAttachment name of testPV on the node.
func vaName(node string) string { return volumename.AttachmentName(testHandle, testDriver, node) }

// objectOn is an attached VolumeAttachment of testPV on the node.
func objectOn(name, node string, uid types.UID) *storagev1.VolumeAttachment {
	pv := testPV.PVName
	return &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid, ResourceVersion: "5"},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: testDriver, NodeName: node,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv},
		},
		Status: storagev1.VolumeAttachmentStatus{Attached: true},
	}
}

// addAttached records an attached VolumeAttachment of testPV on the API server,
// in the informer and in the actual state.
func (h *execHarness) addAttached(t *testing.T, name, node string, uid types.UID, multiAttach bool) {
	t.Helper()
	va := objectOn(name, node, uid)
	if err := h.client.Tracker().Add(va.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if err := h.vas.Add(va.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	h.actual.Observe(cache.Observation{
		Volume: testPV.Name, Node: node, VolumeAttachment: name, UID: uid, Attached: true, MultiAttach: multiAttach,
	})
}

func (h *execHarness) onNode(t *testing.T, node string) cache.OnNode {
	t.Helper()
	on, ok := h.actual.Get(testPV.Name, node)
	if !ok {
		t.Fatalf("nothing recorded of %s on %s", testPV.Name, node)
	}
	return on
}

// completeAttach waits for the attach to the node to wait for the informer, and
// shows it the object attached.
func (h *execHarness) completeAttach(t *testing.T, node string) {
	t.Helper()
	name := vaName(node)
	h.waitWaiting(t, name)
	va, err := h.client.StorageV1().VolumeAttachments().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.exec.ObserveVolumeAttachment(name, withStatus(va, func(va *storagev1.VolumeAttachment) { va.Status.Attached = true }))
	h.waitDone(t)
}

func (h *execHarness) createdOn(node string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.ContainsFunc(h.created, func(va *storagev1.VolumeAttachment) bool { return va.Spec.NodeName == node })
}

func (h *execHarness) operations(kind, result string) float64 {
	return testutil.ToFloat64(h.metrics.Operations.WithLabelValues(kind, result))
}

// wantHeld checks that err is a *HeldError naming exactly nodes, and that the
// refused attach left nothing behind: no create, no lock, no backoff.
func (h *execHarness) wantHeld(t *testing.T, err error, node string, nodes ...string) {
	t.Helper()
	var held *HeldError
	if !errors.As(err, &held) {
		t.Fatalf("Attach to %s = %v, want a *HeldError", node, err)
	}
	if !slices.Equal(held.Nodes, nodes) {
		t.Errorf("HeldError.Nodes = %q, want %q", held.Nodes, nodes)
	}
	if h.createdOn(node) {
		t.Errorf("a VolumeAttachment for %s was created though the volume is held", node)
	}
	if h.exec.IsRunning(testPV.Name, node) {
		t.Error("the lock is still held after the attach was refused")
	}
	if h.backingOff(testPV.Name, node) {
		t.Error("a refused attach backs off: it never ran")
	}
}

// TestAttachChecksHoldersUnderTheLock guards against "decisions on a stale
// snapshot": the caller decided from a snapshot of the actual state taken before
// the attach to node A started; the executor must look again once it holds the
// volume's lock.
func TestAttachChecksHoldersUnderTheLock(t *testing.T) {
	h := newExecHarness(t, time.Minute)
	h.informerSeesCreates = true
	snapshot := h.actual.Volume(testPV.Name)

	if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
		t.Fatalf("Attach to %s: %v", testNode, err)
	}
	// While the attach to A runs, the lock answers.
	if err := h.exec.Attach(t.Context(), testPV, otherNode, testPods); !errors.Is(err, ErrPending) {
		t.Errorf("Attach to %s while the attach to %s runs = %v, want ErrPending", otherNode, testNode, err)
	}
	h.completeAttach(t, testNode)

	// The caller's snapshot still shows nobody holding the volume...
	if len(snapshot) != 0 {
		t.Fatalf("snapshot = %+v, want empty", snapshot)
	}
	// ...but the executor does not decide on it.
	err := h.exec.Attach(t.Context(), testPV, otherNode, testPods)
	h.wantHeld(t, err, otherNode, testNode)
}

// TestAttachRefusesASingleAttachVolumeHeldElsewhere: whatever holds the volume on
// another node, known from the informer, from a create without an answer, or from
// a VolumeAttachment whose volume is not identified yet, refuses a single-attach
// volume and only that.
func TestAttachRefusesASingleAttachVolumeHeldElsewhere(t *testing.T) {
	tests := []struct {
		name      string
		setup     func(t *testing.T, h *execHarness)
		vol       cache.Volume
		wantHeld  []string
		wantStart bool
	}{
		{
			name:      "nothing anywhere",
			setup:     func(*testing.T, *execHarness) {},
			vol:       testPV,
			wantStart: true,
		},
		{
			name:     "attached on another node",
			setup:    func(t *testing.T, h *execHarness) { h.addAttached(t, vaName(testNode), testNode, vaUID, false) },
			vol:      testPV,
			wantHeld: []string{testNode},
		},
		{
			name: "being deleted on another node",
			setup: func(t *testing.T, h *execHarness) {
				h.actual.Observe(cache.Observation{Volume: testPV.Name, Node: testNode, VolumeAttachment: vaName(testNode), UID: vaUID, Attached: true, Deleting: true})
			},
			vol:      testPV,
			wantHeld: []string{testNode},
		},
		{
			name: "a create without an answer on another node",
			setup: func(t *testing.T, h *execHarness) {
				h.actual.BeginCreate(testPV.Name, testNode, vaName(testNode), false)
			},
			vol:      testPV,
			wantHeld: []string{testNode},
		},
		{
			name: "an unidentified VolumeAttachment naming the PV on two nodes",
			setup: func(t *testing.T, h *execHarness) {
				h.actual.ObserveUnresolved(cache.UnresolvedAttachment{VolumeAttachment: "csi-x", PVName: testPV.PVName, Node: "node-4"})
				h.actual.ObserveUnresolved(cache.UnresolvedAttachment{VolumeAttachment: "csi-y", PVName: testPV.PVName, Node: "node-3"})
			},
			vol:      testPV,
			wantHeld: []string{"node-3", "node-4"},
		},
		{
			name: "an unidentified VolumeAttachment of another PV",
			setup: func(t *testing.T, h *execHarness) {
				h.actual.ObserveUnresolved(cache.UnresolvedAttachment{VolumeAttachment: "csi-x", PVName: "pv-other", Node: "node-3"})
			},
			vol:       testPV,
			wantStart: true,
		},
		{
			name:      "multi-attach volume attached on another node",
			setup:     func(t *testing.T, h *execHarness) { h.addAttached(t, vaName(testNode), testNode, vaUID, true) },
			vol:       testRWX,
			wantStart: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, time.Minute)
			h.informerSeesCreates = true
			tc.setup(t, h)
			err := h.exec.Attach(t.Context(), tc.vol, otherNode, testPods)
			if !tc.wantStart {
				h.wantHeld(t, err, otherNode, tc.wantHeld...)
				return
			}
			if err != nil {
				t.Fatalf("Attach = %v, want it started", err)
			}
			h.completeAttach(t, otherNode)
		})
	}
}

// connectionReset stands for a request whose answer never came back.
var connectionReset = fmt.Errorf("Post \"https://apiserver/apis/storage.k8s.io/v1/volumeattachments\": %w", io.ErrUnexpectedEOF)

// TestAttachCreateOfUnknownOutcomeKeepsTheHolder: a create the API server may have
// carried out counts as existing, so that no other node gets a single-attach
// volume meanwhile; a create the API server refused is forgotten.
func TestAttachCreateOfUnknownOutcomeKeepsTheHolder(t *testing.T) {
	invalid := apierrors.NewInvalid(storagev1.SchemeGroupVersion.WithKind("VolumeAttachment").GroupKind(), testVAName,
		field.ErrorList{field.Required(field.NewPath("spec", "attacher"), "")})
	tests := []struct {
		name string
		err  error
		// applied: the API server created the object before the answer was lost.
		applied  bool
		wantKept bool
	}{
		{name: "500, created", err: apierrors.NewInternalError(errors.New("etcd leader changed")), applied: true, wantKept: true},
		{name: "500, not created", err: apierrors.NewInternalError(errors.New("etcd leader changed")), wantKept: true},
		{name: "connection lost, created", err: connectionReset, applied: true, wantKept: true},
		{name: "server timeout, created", err: apierrors.NewTimeoutError("request did not complete within 60s", 1), applied: true, wantKept: true},
		{name: "503", err: apierrors.NewServiceUnavailable("shutting down"), wantKept: true},
		{name: "422 Invalid", err: invalid},
		{name: "429 TooManyRequests", err: apierrors.NewTooManyRequests("slow down", 1)},
		{name: "403 Forbidden", err: apierrors.NewForbidden(storagev1.Resource("volumeattachments"), testVAName, errors.New("denied"))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, time.Minute)
			h.informerSeesCreates = true
			h.createErr = tc.err
			h.createApplies = tc.applied
			if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
				t.Fatalf("Attach: %v", err)
			}
			h.waitDone(t)
			if got := h.events(); len(got) != 1 || !strings.HasPrefix(got[0], "Warning FailedAttachVolume") {
				t.Errorf("events = %q, want one FailedAttachVolume", got)
			}
			if !h.backingOff(testPV.Name, testNode) {
				t.Error("no backoff after a failed create")
			}
			att, kept := h.actual.Object(testVAName)
			if kept != tc.wantKept {
				t.Fatalf("record of the object kept = %v, want %v", kept, tc.wantKept)
			}
			if kept && (att.Seen || att.UID != "") {
				t.Errorf("record = %+v, want an unseen object without UID", att)
			}
			h.mu.Lock()
			h.createErr = nil
			h.mu.Unlock()
			err := h.exec.Attach(t.Context(), testPV, otherNode, testPods)
			if tc.wantKept {
				h.wantHeld(t, err, otherNode, testNode)
				return
			}
			if err != nil {
				t.Fatalf("Attach to %s after a refused create = %v, want it started", otherNode, err)
			}
			h.waitWaiting(t, vaName(otherNode))
		})
	}
}

// TestAttachThatNeverSawItsObjectSettlesTheRecord: when the wait ends and the
// informer never showed the object, the API server is asked; only an object it
// does not have is forgotten.
func TestAttachThatNeverSawItsObjectSettlesTheRecord(t *testing.T) {
	tests := []struct {
		name     string
		gone     bool
		getErr   error
		wantKept bool
	}{
		{name: "gone from the API server", gone: true},
		{name: "still on the API server", wantKept: true},
		{name: "the read fails", gone: true, getErr: apierrors.NewInternalError(errors.New("boom")), wantKept: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, 100*time.Millisecond)
			h.getErr = tc.getErr
			if tc.gone {
				// Created, and deleted by someone else before the informer
				// showed it.
				h.client.PrependReactor("create", "volumeattachments", func(a clienttesting.Action) (bool, runtime.Object, error) {
					va := a.(clienttesting.CreateAction).GetObject().(*storagev1.VolumeAttachment).DeepCopy()
					va.UID = vaUID
					return true, va, nil
				})
			}
			if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
				t.Fatalf("Attach: %v", err)
			}
			h.waitDone(t)
			if got := h.events(); len(got) != 1 || !strings.Contains(got[0], "timed out") {
				t.Errorf("events = %q, want the attach to time out", got)
			}
			if _, kept := h.actual.Object(testVAName); kept != tc.wantKept {
				t.Errorf("record kept = %v, want %v", kept, tc.wantKept)
			}
		})
	}
}

// TestDetachDeleteOfUnknownOutcomeIsSettledByReadingBack: a delete whose answer
// was lost is settled by reading the object; while that cannot be learned the
// volume stays out of node status.
func TestDetachDeleteOfUnknownOutcomeIsSettledByReadingBack(t *testing.T) {
	internal := apierrors.NewInternalError(errors.New("etcd leader changed"))
	tests := []struct {
		name      string
		deleteErr error
		// applied: the API server deleted the object; finalizer: it only set
		// the deletionTimestamp, a finalizer keeps the object.
		applied, finalizer bool
		getErr             error
		// wantSettled: the delete is known to have taken effect, and the
		// operation waits for the object to go.
		wantSettled bool
		// wantHidden: the detach failed and the volume stays out of node status.
		wantHidden bool
	}{
		{name: "500, deleted: read finds it gone", deleteErr: internal, applied: true, wantSettled: true},
		{name: "connection lost, deleted: read finds it gone", deleteErr: connectionReset, applied: true, wantSettled: true},
		{name: "server timeout, deleted: read finds it gone", deleteErr: apierrors.NewTimeoutError("slow", 1), applied: true, wantSettled: true},
		{name: "500, finalizer: read finds it being deleted", deleteErr: internal, finalizer: true, wantSettled: true},
		{name: "500, not deleted: read finds it unchanged", deleteErr: internal},
		{name: "500, deleted, read fails too: stays hidden", deleteErr: internal, applied: true, getErr: internal, wantHidden: true},
		{name: "connection lost, not deleted, read fails too: stays hidden", deleteErr: connectionReset, getErr: connectionReset, wantHidden: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, on := newDetachHarness(t, 2*time.Second)
			h.deleteErr = tc.deleteErr
			h.deleteApplies = tc.applied
			h.getErr = tc.getErr
			if tc.finalizer {
				h.client.PrependReactor("delete", "volumeattachments", func(clienttesting.Action) (bool, runtime.Object, error) {
					h.log.add("delete " + testVAName)
					now := metav1.Now()
					va := withStatus(attachedObject(), func(va *storagev1.VolumeAttachment) {
						va.DeletionTimestamp = &now
						va.Finalizers = []string{"external-attacher/" + testDriver}
					})
					if err := h.client.Tracker().Update(vaResource, va, ""); err != nil {
						t.Error(err)
					}
					return true, nil, internal
				})
			}
			if err := h.exec.Detach(t.Context(), on, cache.NotForced); err != nil {
				t.Fatalf("Detach: %v", err)
			}
			if tc.wantSettled {
				h.waitWaiting(t, testVAName)
				if got, _ := h.actual.Get(testPV.Name, testNode); !got.Deleting() || got.Reported() {
					t.Errorf("record once the delete is settled = %+v, want deleting and not reported", got)
				}
				h.exec.ObserveVolumeAttachment(testVAName, nil)
			}
			h.waitDone(t)
			if got, want := h.log.get(), []string{"confirm " + testNode, "delete " + testVAName}; !slices.Equal(got, want) {
				t.Errorf("requests = %q, want %q", got, want)
			}
			got, _ := h.actual.Get(testPV.Name, testNode)
			enqueued := h.status.enqueuedNodes()
			switch {
			case tc.wantSettled:
				if h.operations("detach", "success") != 1 {
					t.Error("the detach did not succeed")
				}
				if got.Reported() || len(enqueued) != 0 {
					t.Errorf("after the detach: %+v, enqueued %q; want not reported, nothing enqueued", got, enqueued)
				}
			case tc.wantHidden:
				if h.operations("detach", "error") != 1 {
					t.Error("the detach did not fail")
				}
				if len(got.Objects) != 1 || got.Objects[0].Deleting {
					t.Errorf("record %+v marked deleting though the outcome is unknown", got)
				}
				if !got.HiddenFromNodeStatus || got.Reported() || len(enqueued) != 0 {
					t.Errorf("after a delete of unknown outcome: %+v, enqueued %q; want the volume kept out of node status", got, enqueued)
				}
			default:
				if h.operations("detach", "error") != 1 {
					t.Error("the detach did not fail")
				}
				if got.Deleting() || !got.Reported() || !slices.Equal(enqueued, []string{testNode}) {
					t.Errorf("after a delete known to have failed: %+v, enqueued %q; want reported again and %s enqueued", got, enqueued, testNode)
				}
			}
		})
	}
}

// TestDetachNotFoundForgetsAnUnseenObject: deleting an object the controller
// tried to create and never saw, and learning that it does not exist, settles it:
// the record goes and stops holding the volume. An object the informer shows is
// left for the informer to forget.
func TestDetachNotFoundForgetsAnUnseenObject(t *testing.T) {
	tests := []struct {
		name       string
		setup      func(t *testing.T, h *execHarness)
		wantUID    types.UID
		wantForget bool
	}{
		{
			name: "create without an answer",
			setup: func(t *testing.T, h *execHarness) {
				h.actual.BeginCreate(testPV.Name, testNode, testVAName, false)
			},
			wantForget: true,
		},
		{
			name: "created, never seen",
			setup: func(t *testing.T, h *execHarness) {
				h.actual.BeginCreate(testPV.Name, testNode, testVAName, false)
				h.actual.Created(testVAName, vaUID)
			},
			wantUID:    vaUID,
			wantForget: true,
		},
		{
			name: "seen by the informer, already gone from the API server",
			setup: func(t *testing.T, h *execHarness) {
				if err := h.vas.Add(attachedObject()); err != nil {
					t.Fatal(err)
				}
				h.actual.Observe(cache.Observation{Volume: testPV.Name, Node: testNode, VolumeAttachment: testVAName, UID: vaUID, Attached: true})
			},
			wantUID: vaUID,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, time.Minute)
			tc.setup(t, h)
			if err := h.exec.Detach(t.Context(), h.onNode(t, testNode), cache.NotForced); err != nil {
				t.Fatalf("Detach: %v", err)
			}
			if !tc.wantForget {
				h.waitWaiting(t, testVAName)
				if _, ok := h.actual.Object(testVAName); !ok {
					t.Error("an object the informer shows was forgotten on NotFound")
				}
				h.exec.ObserveVolumeAttachment(testVAName, nil)
			}
			h.waitDone(t)
			if h.operations("detach", "success") != 1 {
				t.Error("the detach did not succeed")
			}
			h.mu.Lock()
			deletes := h.deletes
			h.mu.Unlock()
			if len(deletes) != 1 {
				t.Fatalf("%d deletes, want 1", len(deletes))
			}
			var gotUID types.UID
			if pre := deletes[0].GetDeleteOptions().Preconditions; pre != nil && pre.UID != nil {
				gotUID = *pre.UID
			}
			if gotUID != tc.wantUID {
				t.Errorf("delete precondition uid %q, want %q", gotUID, tc.wantUID)
			}
			if !tc.wantForget {
				return
			}
			if _, ok := h.actual.Object(testVAName); ok {
				t.Error("the unseen object is still recorded after its delete found nothing")
			}
			if holders := h.actual.Holders(testPV.Name, testPV.PVName, otherNode); len(holders) != 0 {
				t.Errorf("holders = %q, want none", holders)
			}
		})
	}
}

// inUseNode is the node as the API server returns it, reporting testPV in use.
func inUseNode(ready, outOfService bool) *v1.Node {
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: testNode, Annotations: map[string]string{cache.ManagedAnnotation: "true"}},
		Status:     v1.NodeStatus{VolumesInUse: []v1.UniqueVolumeName{v1.UniqueVolumeName(testPV.Name)}},
	}
	status := v1.ConditionFalse
	if ready {
		status = v1.ConditionTrue
	}
	n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: status}}
	if outOfService {
		n.Spec.Taints = []v1.Taint{{Key: cache.OutOfServiceTaint, Value: "nodeshutdown", Effect: v1.TaintEffectNoExecute}}
	}
	return n
}

// TestDetachDecidesOnTheConfirmedNodeNotTheInformers: once node status no
// longer lists the volume, the node the API server returned decides: a volume it
// reports in use is detached only if the force rule the caller named still holds
// on that node. Guards against "force detach on a stale node": the informer's
// node carried the out-of-service taint, or was NotReady, and the API server's no
// longer does.
func TestDetachDecidesOnTheConfirmedNodeNotTheInformers(t *testing.T) {
	notInUse := inUseNode(true, false)
	notInUse.Status.VolumesInUse = nil
	noReadyCondition := inUseNode(false, false)
	noReadyCondition.Status.Conditions = nil
	shutdownTainted := func(ready bool) *v1.Node {
		n := inUseNode(ready, false)
		n.Spec.Taints = []v1.Taint{{Key: cache.ShutdownTaint, Effect: v1.TaintEffectNoSchedule}}
		return n
	}
	tests := []struct {
		name string
		node *v1.Node
		// deleted is the node's last state in the register once its deletion
		// was seen; an empty node stands for a deletion whose last report was
		// not seen.
		deleted *v1.Node
		// informer is the node as the register last showed it present, before
		// any deletion (none: notInUse).
		informer *v1.Node
		// neededOnNode: a read of the node's pods finds one that needs the volume.
		neededOnNode bool
		force        cache.ForceRule
		wantErr      error
		wantForce    string
	}{
		{name: "in use, not forced", node: inUseNode(true, false), force: cache.NotForced, wantErr: ErrInUse},
		{name: "in use on a NotReady node, not forced", node: inUseNode(false, true), force: cache.NotForced, wantErr: ErrInUse},
		{name: "in use, out-of-service, the node carries the taint", node: inUseNode(false, true), force: cache.ForcedOutOfService, wantForce: "out-of-service"},
		{name: "in use, out-of-service, the node carries the taint and is Ready", node: inUseNode(true, true), force: cache.ForcedOutOfService, wantForce: "out-of-service"},
		{name: "stale node: out-of-service, the taint is gone", node: inUseNode(false, false), force: cache.ForcedOutOfService, wantErr: ErrInUse},
		{name: "in use, timeout, the node is NotReady", node: inUseNode(false, false), force: cache.ForcedOnTimeout, wantForce: "timeout"},
		{name: "in use, timeout, the node has no Ready condition", node: noReadyCondition, force: cache.ForcedOnTimeout, wantForce: "timeout"},
		{name: "stale node: timeout, the node is Ready again", node: inUseNode(true, false), force: cache.ForcedOnTimeout, wantErr: ErrInUse},
		{name: "stale node: timeout, Ready again though tainted", node: inUseNode(true, true), force: cache.ForcedOnTimeout, wantErr: ErrInUse},
		{name: "in use, shutdown, the node carries the taint and is NotReady", node: shutdownTainted(false), force: cache.ForcedOnShutdown, wantForce: "shutdown"},
		{name: "stale node: shutdown, the node is Ready again", node: shutdownTainted(true), force: cache.ForcedOnShutdown, wantErr: ErrInUse},
		{name: "stale node: shutdown, the taint is gone", node: inUseNode(false, false), force: cache.ForcedOnShutdown, wantErr: ErrInUse},
		{name: "not in use, not forced", node: notInUse, force: cache.NotForced},
		{name: "not in use, forced: no force counted", node: notInUse, force: cache.ForcedOutOfService},
		{name: "node gone, its deletion not seen yet", node: nil, force: cache.NotForced, wantErr: ErrInUse},
		{name: "node gone, its last report listed the volume in use", node: nil, deleted: inUseNode(true, false), force: cache.NotForced, wantErr: ErrInUse},
		{name: "node gone, its last report did not list the volume", node: nil, deleted: notInUse, force: cache.NotForced},
		{name: "node gone, its last report was not seen", node: nil, deleted: &v1.Node{}, force: cache.NotForced, wantErr: ErrInUse},
		{name: "node gone, timeout", node: nil, force: cache.ForcedOnTimeout, wantForce: "timeout"},
		{name: "node gone, timeout, but a pod the informer has not shown needs the volume", node: nil, neededOnNode: true, force: cache.ForcedOnTimeout, wantErr: ErrWanted},
		{name: "node gone, out-of-service, its deletion not seen yet", node: nil, informer: inUseNode(false, true), force: cache.ForcedOutOfService, wantErr: ErrInUse},
		{name: "node gone, out-of-service, its final state carried the taint", node: nil, deleted: inUseNode(false, true), force: cache.ForcedOutOfService, wantForce: "out-of-service"},
		{name: "node gone, out-of-service, its final state no longer carried the taint", node: nil, deleted: inUseNode(false, false), force: cache.ForcedOutOfService, wantErr: ErrInUse},
		{name: "node gone, out-of-service, its final state not seen", node: nil, informer: inUseNode(false, true), deleted: &v1.Node{}, force: cache.ForcedOutOfService, wantErr: ErrInUse},
		{name: "node gone, shutdown, its final state tainted and NotReady", node: nil, deleted: shutdownTainted(false), force: cache.ForcedOnShutdown, wantForce: "shutdown"},
		{name: "node gone, shutdown, its final state tainted but Ready again", node: nil, deleted: shutdownTainted(true), force: cache.ForcedOnShutdown, wantErr: ErrInUse},
		{name: "node gone, shutdown, its final state not seen", node: nil, informer: shutdownTainted(false), deleted: &v1.Node{}, force: cache.ForcedOnShutdown, wantErr: ErrInUse},
		{name: "timeout, but a pod the informer has not shown needs the volume", node: inUseNode(false, false), neededOnNode: true, force: cache.ForcedOnTimeout, wantErr: ErrWanted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, on := newDetachHarness(t, time.Minute)
			h.informerSeesDeletes = true
			h.status.node = tc.node
			h.neededOnNode = tc.neededOnNode
			if tc.informer != nil {
				h.nodes.Set(cache.NodeFromObject(tc.informer))
			}
			switch {
			case tc.deleted == nil:
			case tc.deleted.Name == "":
				if tc.informer == nil {
					h.nodes.Set(cache.NodeFromObject(notInUse))
				}
				h.nodes.MarkDeleted(testNode, nil)
			default:
				h.nodes.MarkDeleted(testNode, tc.deleted)
			}
			err := h.exec.detach(t.Context(), on, tc.force)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("detach = %v, want %v", err, tc.wantErr)
			}
			for _, reason := range []string{"out-of-service", "timeout", "shutdown"} {
				want := 0.0
				if reason == tc.wantForce {
					want = 1
				}
				if got := testutil.ToFloat64(h.metrics.ForceDetaches.WithLabelValues(reason)); got != want {
					t.Errorf("force detaches %q = %v, want %v", reason, got, want)
				}
			}
			got, _ := h.actual.Get(testPV.Name, testNode)
			if tc.wantErr != nil {
				if h.deleteCount() != 0 {
					t.Error("deleted though the detach was called off")
				}
				if !got.Reported() || !slices.Equal(h.status.enqueuedNodes(), []string{testNode}) {
					t.Errorf("after the called-off detach %+v, enqueued %q; want reported again and %s enqueued", got, h.status.enqueuedNodes(), testNode)
				}
				return
			}
			if h.deleteCount() != 1 || !got.Deleting() || got.Reported() {
				t.Errorf("after the detach: %d deletes, %+v; want 1 delete, deleting, not reported", h.deleteCount(), got)
			}
		})
	}
}

// TestDetachCalledOffWhenAPodWantsTheVolumeAgain: a pod scheduled to the node
// while the detach confirmed node status calls it off, and the volume is listed
// again.
func TestDetachCalledOffWhenAPodWantsTheVolumeAgain(t *testing.T) {
	h, on := newDetachHarness(t, time.Minute)
	h.wanted = true
	if err := h.exec.detach(t.Context(), on, cache.NotForced); !errors.Is(err, ErrWanted) {
		t.Fatalf("detach = %v, want ErrWanted", err)
	}
	h.mu.Lock()
	asked := slices.Clone(h.confirmsAtWanted)
	h.mu.Unlock()
	if !slices.Equal(asked, []int{1}) {
		t.Errorf("Wanted asked after %v Confirm calls, want once, after the one Confirm", asked)
	}
	if h.deleteCount() != 0 {
		t.Error("deleted a VolumeAttachment a pod wants")
	}
	if got, _ := h.actual.Get(testPV.Name, testNode); !got.Reported() || got.HiddenFromNodeStatus {
		t.Errorf("attachment after the called-off detach = %+v, want listed in node status again", got)
	}
	if got := h.status.enqueuedNodes(); !slices.Equal(got, []string{testNode}) {
		t.Errorf("node status enqueued %q, want [%s]", got, testNode)
	}
}

// TestDetachDeletesEveryObjectOfThePair: another tool made a second
// VolumeAttachment of the volume on the node; each holds the volume, and each is
// deleted, with its own UID as precondition.
func TestDetachDeletesEveryObjectOfThePair(t *testing.T) {
	const extra = "csi-extra"
	for _, tc := range []struct {
		name          string
		extraDeleting bool
		wantDeleted   []string
	}{
		{name: "both live", wantDeleted: []string{extra, testVAName}},
		{name: "one already being deleted", extraDeleting: true, wantDeleted: []string{testVAName}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := newDetachHarness(t, time.Minute)
			h.addAttached(t, extra, testNode, "uid-extra", false)
			if tc.extraDeleting {
				h.actual.MarkDeleting(extra, "uid-extra")
			}
			h.informerSeesDeletes = true
			on := h.onNode(t, testNode)
			if len(on.Objects) != 2 {
				t.Fatalf("objects on the node = %+v, want 2", on.Objects)
			}
			if err := h.exec.Detach(t.Context(), on, cache.NotForced); err != nil {
				t.Fatalf("Detach: %v", err)
			}
			if tc.extraDeleting {
				// The informer still shows it: the detach waits for it too.
				h.waitWaiting(t, extra)
				h.exec.ObserveVolumeAttachment(extra, nil)
			}
			h.waitDone(t)
			if h.operations("detach", "success") != 1 {
				t.Error("the detach did not succeed")
			}
			h.mu.Lock()
			deletes := slices.Clone(h.deletes)
			h.mu.Unlock()
			var names []string
			for _, d := range deletes {
				names = append(names, d.GetName())
				want := map[string]types.UID{testVAName: vaUID, extra: "uid-extra"}[d.GetName()]
				if pre := d.GetDeleteOptions().Preconditions; pre == nil || pre.UID == nil || *pre.UID != want {
					t.Errorf("delete of %s: preconditions %+v, want uid %s", d.GetName(), pre, want)
				}
			}
			slices.Sort(names)
			slices.Sort(tc.wantDeleted)
			if !slices.Equal(names, tc.wantDeleted) {
				t.Errorf("deleted %q, want %q", names, tc.wantDeleted)
			}
			if got := h.onNode(t, testNode); !got.Deleting() {
				t.Errorf("after the detach %+v, want every object deleting", got)
			}
		})
	}
}

// TestAttachAndDetachDoNotShareOneBackoff guards against "attach and detach share
// one backoff": a failed attach must not delay the detach that follows when the
// pod goes away, nor a failed detach the attach of a pod that comes back.
func TestAttachAndDetachDoNotShareOneBackoff(t *testing.T) {
	t.Run("failed attach, then detach", func(t *testing.T) {
		h := newExecHarness(t, time.Minute)
		h.createErr = apierrors.NewInternalError(errors.New("etcd leader changed"))
		h.createApplies = true
		h.informerSeesDeletes = true
		if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
			t.Fatalf("Attach: %v", err)
		}
		h.waitDone(t)
		var backoff *BackoffError
		if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); !errors.As(err, &backoff) {
			t.Fatalf("Attach right after a failed attach = %v, want a BackoffError", err)
		}
		if err := h.exec.Detach(t.Context(), h.onNode(t, testNode), cache.NotForced); err != nil {
			t.Fatalf("Detach right after a failed attach = %v, want it started at once", err)
		}
		h.waitDone(t)
		if h.operations("detach", "success") != 1 {
			t.Error("the detach did not succeed")
		}
	})
	t.Run("failed detach, then attach", func(t *testing.T) {
		h, on := newDetachHarness(t, time.Minute)
		h.status.err = errors.New("node status patch refused")
		if err := h.exec.Detach(t.Context(), on, cache.NotForced); err != nil {
			t.Fatalf("Detach: %v", err)
		}
		h.waitDone(t)
		var backoff *BackoffError
		if err := h.exec.Detach(t.Context(), on, cache.NotForced); !errors.As(err, &backoff) {
			t.Fatalf("Detach right after a failed detach = %v, want a BackoffError", err)
		}
		if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
			t.Fatalf("Attach right after a failed detach = %v, want it started at once", err)
		}
		h.waitDone(t)
		if h.operations("attach", "success") != 1 {
			t.Error("the attach did not succeed")
		}
	})
}

// TestAttachObservedReportsOnlyAFailedAttach: the success event for an attach the
// external-attacher finished after the operation gave up follows a failed attach,
// not a failed detach.
func TestAttachObservedReportsOnlyAFailedAttach(t *testing.T) {
	success := `Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "pv-1" `
	for _, tc := range []struct {
		name      string
		fail      func(t *testing.T) *execHarness
		wantEvent bool
	}{
		{
			name: "nothing failed",
			fail: func(t *testing.T) *execHarness {
				h, _ := newDetachHarness(t, time.Minute)
				return h
			},
		},
		{
			name: "attach failed",
			fail: func(t *testing.T) *execHarness {
				h := newExecHarness(t, time.Minute)
				h.createErr = apierrors.NewForbidden(storagev1.Resource("volumeattachments"), testVAName, errors.New("denied"))
				if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
					t.Fatal(err)
				}
				h.waitDone(t)
				return h
			},
			wantEvent: true,
		},
		{
			name: "detach failed",
			fail: func(t *testing.T) *execHarness {
				h, on := newDetachHarness(t, time.Minute)
				h.status.err = errors.New("node status patch refused")
				if err := h.exec.Detach(t.Context(), on, cache.NotForced); err != nil {
					t.Fatal(err)
				}
				h.waitDone(t)
				return h
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.fail(t)
			h.events()
			h.exec.AttachObserved(testPV, testNode, testPods)
			got := h.events()
			want := []string(nil)
			if tc.wantEvent {
				want = []string{success}
			}
			if !slices.Equal(got, want) {
				t.Errorf("events = %q, want %q", got, want)
			}
			if h.backingOff(testPV.Name, testNode) {
				t.Error("still backing off once the volume is seen attached")
			}
		})
	}
}

// TestRWXDetachesOfTwoNodesRunAtOnce guards against "RWX detaches one node at a
// time": the detach of a multi-attach volume holds only its node, so the detach
// from another node starts at once; a single-attach volume's holds it all.
func TestRWXDetachesOfTwoNodesRunAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name        string
		multiAttach bool
		wantSecond  error
	}{
		{name: "multi-attach", multiAttach: true},
		{name: "single-attach", multiAttach: false, wantSecond: ErrPending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, time.Minute)
			for i, node := range []string{testNode, otherNode} {
				h.addAttached(t, vaName(node), node, types.UID(fmt.Sprint("uid-", i)), tc.multiAttach)
			}
			if err := h.exec.Detach(t.Context(), h.onNode(t, testNode), cache.NotForced); err != nil {
				t.Fatalf("first Detach: %v", err)
			}
			h.waitWaiting(t, vaName(testNode))
			err := h.exec.Detach(t.Context(), h.onNode(t, otherNode), cache.NotForced)
			if !errors.Is(err, tc.wantSecond) || (tc.wantSecond == nil && err != nil) {
				t.Fatalf("Detach from %s while %s detaches = %v, want %v", otherNode, testNode, err, tc.wantSecond)
			}
			if got := h.exec.IsRunning(testPV.Name, "node-3"); got != !tc.multiAttach {
				t.Errorf("IsRunning on an uninvolved node = %v, want %v", got, !tc.multiAttach)
			}
			ops := 1
			if err == nil {
				ops = 2
				h.waitWaiting(t, vaName(otherNode))
				h.exec.ObserveVolumeAttachment(vaName(otherNode), nil)
			}
			h.exec.ObserveVolumeAttachment(vaName(testNode), nil)
			for range ops {
				h.waitDone(t)
			}
			if got := h.operations("detach", "success"); got != float64(ops) {
				t.Errorf("%v detaches succeeded, want %d", got, ops)
			}
		})
	}
}

// TestForgetExpiredDropsOldBackoffEntries guards against the leak of backoff
// entries: a pair that failed once and was never tried again is forgotten once
// its backoff ran out more than maxBackoff ago, and the rest are kept.
func TestForgetExpiredDropsOldBackoffEntries(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	l := newLocks(func() time.Time { return now })
	fail := func(vol volumename.UniqueName, node string, k kind) {
		t.Helper()
		key := lockFor(vol, node, true)
		if err := l.acquire(key, node, k); err != nil {
			t.Fatalf("acquire %s %s: %v", vol, node, err)
		}
		l.release(key, node, k, true)
	}
	fail(vol1, "a", attachKind) // until start+500ms
	fail(vol1, "b", detachKind) // until start+500ms
	now = start.Add(time.Minute)
	fail(vol2, "a", attachKind) // until start+1m+500ms
	if got := len(l.backoff); got != 3 {
		t.Fatalf("%d backoff entries, want 3", got)
	}

	// Exactly maxBackoff after the first two ran out: kept.
	now = start.Add(initialBackoff + maxBackoff)
	l.forgetExpired()
	if got := len(l.backoff); got != 3 {
		t.Errorf("%d backoff entries maxBackoff after they ran out, want 3", got)
	}
	now = now.Add(time.Millisecond)
	l.forgetExpired()
	if got := len(l.backoff); got != 1 {
		t.Errorf("%d backoff entries, want 1: only the recent failure", got)
	}
	now = now.Add(time.Minute)
	l.forgetExpired()
	if got := len(l.backoff); got != 0 {
		t.Errorf("%d backoff entries once all ran out long ago, want 0", got)
	}

	// Through the executor.
	h := newExecHarness(t, time.Minute)
	h.exec.locks.now = func() time.Time { return now }
	h.createErr = apierrors.NewForbidden(storagev1.Resource("volumeattachments"), testVAName, errors.New("denied"))
	if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
		t.Fatal(err)
	}
	h.waitDone(t)
	h.exec.ForgetExpired()
	if !h.backingOff(testPV.Name, testNode) {
		t.Fatal("a running backoff was forgotten")
	}
	now = now.Add(initialBackoff + maxBackoff + time.Millisecond)
	h.exec.ForgetExpired()
	if h.backingOff(testPV.Name, testNode) {
		t.Error("ForgetExpired kept a backoff that ran out long ago")
	}
}

// TestLocksBackoffIsPerKind: a failure delays the next operation of its own kind
// only; the other kind starts at once and drops it.
func TestLocksBackoffIsPerKind(t *testing.T) {
	for _, tc := range []struct {
		name        string
		failed, try kind
		wantBackoff bool
	}{
		{"attach failed, attach again", attachKind, attachKind, true},
		{"attach failed, detach", attachKind, detachKind, false},
		{"detach failed, attach", detachKind, attachKind, false},
		{"detach failed, detach again", detachKind, detachKind, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
			l := newLocks(func() time.Time { return now })
			key := lockFor(vol1, "a", false)
			for range 3 {
				if err := l.acquire(key, "a", tc.failed); err != nil {
					t.Fatal(err)
				}
				l.release(key, "a", tc.failed, true)
				now = now.Add(maxBackoff)
			}
			now = now.Add(-maxBackoff)
			err := l.acquire(key, "a", tc.try)
			var backoff *BackoffError
			if errors.As(err, &backoff) != tc.wantBackoff || (!tc.wantBackoff && err != nil) {
				t.Fatalf("acquire = %v, want backoff %v", err, tc.wantBackoff)
			}
			if tc.wantBackoff {
				return
			}
			// The other kind's failure starts from the initial delay, not from
			// where the first kind had got to.
			l.release(key, "a", tc.try, true)
			if err := l.acquire(key, "a", tc.try); !errors.As(err, &backoff) || backoff.Remaining != initialBackoff {
				t.Errorf("after a failure of the other kind acquire = %v, want the initial backoff %v", err, initialBackoff)
			}
			if got := l.resetBackoff(vol1, "a"); got != (tc.try == attachKind) {
				t.Errorf("resetBackoff = %v, want %v (true only after a failed attach)", got, tc.try == attachKind)
			}
		})
	}
}

// TestBackoffStartsAgainAfterAQuietPeriod: a failure long after the last one
// backs off from the initial delay again.
func TestBackoffStartsAgainAfterAQuietPeriod(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newLocks(func() time.Time { return now })
	key := lockFor(vol1, "a", false)
	fail := func() {
		t.Helper()
		if err := l.acquire(key, "a", attachKind); err != nil {
			t.Fatal(err)
		}
		l.release(key, "a", attachKind, true)
	}
	fail()
	now = now.Add(initialBackoff)
	fail() // 1s
	now = now.Add(time.Second + maxBackoff + time.Millisecond)
	fail()
	var backoff *BackoffError
	if err := l.acquire(key, "a", attachKind); !errors.As(err, &backoff) || backoff.Remaining != initialBackoff {
		t.Errorf("acquire = %v, want the initial backoff %v", err, initialBackoff)
	}
}

// TestWaitReturnsOnlyAfterRunningOperationsEnd: shutdown waits for the
// operations that run, and gives up when its own context ends.
func TestWaitReturnsOnlyAfterRunningOperationsEnd(t *testing.T) {
	h := newExecHarness(t, time.Minute)
	h.informerSeesCreates = true
	if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
		t.Fatal(err)
	}
	h.waitWaiting(t, testVAName)

	short, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := h.exec.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait while an attach runs = %v, want the context's deadline", err)
	}

	waited := make(chan error, 1)
	go func() { waited <- h.exec.Wait(context.Background()) }()
	select {
	case err := <-waited:
		t.Fatalf("Wait returned %v while the attach runs", err)
	case <-time.After(20 * time.Millisecond):
	}
	va, err := h.client.StorageV1().VolumeAttachments().Get(t.Context(), testVAName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.exec.ObserveVolumeAttachment(testVAName, withStatus(va, func(va *storagev1.VolumeAttachment) { va.Status.Attached = true }))
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("Wait = %v once the attach ended", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Wait did not return once the attach ended")
	}
	h.waitDone(t)
	again, cancelAgain := context.WithTimeout(t.Context(), waitLimit)
	defer cancelAgain()
	if err := h.exec.Wait(again); err != nil {
		t.Errorf("Wait with nothing running = %v", err)
	}
}

// TestDetachNeverDeletesWhileTheConfirmedNodeListsTheVolume: the node the API
// server returned is the proof that kubelet can no longer see the volume
// attached. A confirmation answered by a write computed before the volume was
// taken out (a status updater that mixed up which write covers which caller)
// must not let the delete go ahead, whatever else that node says.
func TestDetachNeverDeletesWhileTheConfirmedNodeListsTheVolume(t *testing.T) {
	listed := v1.AttachedVolume{Name: v1.UniqueVolumeName(testPV.Name)}
	tests := []struct {
		name  string
		force cache.ForceRule
		node  func() *v1.Node
	}{
		{name: "not in use, not forced", force: cache.NotForced, node: func() *v1.Node {
			n := inUseNode(true, false)
			n.Status.VolumesInUse = nil
			return n
		}},
		{name: "in use on a node out of service, forced", force: cache.ForcedOutOfService, node: func() *v1.Node { return inUseNode(false, true) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, on := newDetachHarness(t, time.Minute)
			h.informerSeesDeletes = true
			n := tc.node()
			n.Status.VolumesAttached = []v1.AttachedVolume{listed}
			h.status.node = n
			if err := h.exec.detach(t.Context(), on, tc.force); err == nil {
				t.Fatal("detach = nil, want an error: the confirmed node still lists the volume")
			}
			if h.deleteCount() != 0 {
				t.Error("deleted the VolumeAttachment of a volume node status still lists")
			}
			if got, _ := h.actual.Get(testPV.Name, testNode); !got.Reported() {
				t.Errorf("attachment after the failed detach = %+v, want listed in node status again", got)
			}
		})
	}
}
