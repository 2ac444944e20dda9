package operationexecutor

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
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
	"github.com/attachdetach-controller/attachdetach-controller/pkg/podevents"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

const (
	testDriver = "example.csi.k8s.io"
	testNode   = "node-1"
	testHandle = "vol-0123"
	vaUID      = types.UID("va-uid")
	waitLimit  = 5 * time.Second
)

var (
	testPV = cache.Volume{
		Name: volumename.CSI(testDriver, testHandle), Driver: testDriver, Handle: testHandle,
		PVName: "pv-1", DisplayName: "pv-1",
	}
	testPods = []cache.PodRef{{Namespace: "ns", Name: "db-0", UID: "pod-uid"}}
	// testVAName is the contract name, computed here independently.
	testVAName = fmt.Sprintf("csi-%x", sha256.Sum256([]byte(testHandle+testDriver+testNode)))
)

// orderLog records, in order, the requests the operations made.
type orderLog struct {
	mu      sync.Mutex
	entries []string
}

func (l *orderLog) add(e string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, e)
}

func (l *orderLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.entries)
}

// fakeNodeStatus stands for the status updater: it records its calls, what node
// status would list at the moment of each Confirm, and returns node as the API
// server's node.
type fakeNodeStatus struct {
	actual *cache.ActualState
	log    *orderLog

	mu                sync.Mutex
	err               error
	node              *v1.Node
	gate              chan struct{}
	confirms          int
	reportedAtConfirm [][]volumename.UniqueName
	enqueued          []string
}

func (f *fakeNodeStatus) Confirm(ctx context.Context, node string) (*v1.Node, error) {
	f.log.add("confirm " + node)
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.confirms++
	f.reportedAtConfirm = append(f.reportedAtConfirm, f.actual.ReportedVolumes(node))
	return f.node.DeepCopy(), f.err
}

func (f *fakeNodeStatus) Enqueue(node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.enqueued = append(f.enqueued, node)
}

func (f *fakeNodeStatus) enqueuedNodes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.enqueued)
}

func (f *fakeNodeStatus) confirmCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.confirms
}

var vaResource = storagev1.SchemeGroupVersion.WithResource("volumeattachments")

type execHarness struct {
	client   *fake.Clientset
	vas      toolscache.Indexer
	actual   *cache.ActualState
	nodes    *cache.Nodes
	status   *fakeNodeStatus
	log      *orderLog
	recorder *record.FakeRecorder
	metrics  *metrics.Metrics
	done     chan volumename.UniqueName
	exec     *Executor

	mu sync.Mutex
	// informerSeesCreates makes the VolumeAttachment informer hold every created
	// object by the time Create returns.
	informerSeesCreates bool
	// informerSeesDeletes makes the informer drop every deleted object by the
	// time Delete returns.
	informerSeesDeletes bool
	// createErr and deleteErr make the request fail; with createApplies or
	// deleteApplies the API server did the work before the answer was lost.
	createErr     error
	createApplies bool
	deleteErr     error
	deleteApplies bool
	// getErr makes every read of a VolumeAttachment fail.
	getErr error
	// wanted is what Config.Wanted answers; confirmsAtWanted records how many
	// Confirm calls had ended each time it was asked.
	wanted           bool
	confirmsAtWanted []int
	// neededOnNode is what a read of the node's pods from the API server finds,
	// and readPodsErr its error.
	neededOnNode bool
	readPodsErr  error
	created      []*storagev1.VolumeAttachment
	deletes      []clienttesting.DeleteAction
}

// attachCreated has the informer show the VolumeAttachment the attach created,
// attached.
func (h *execHarness) attachCreated(t *testing.T) {
	t.Helper()
	va, err := h.client.StorageV1().VolumeAttachments().Get(t.Context(), testVAName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.exec.ObserveVolumeAttachment(testVAName, withStatus(va, func(va *storagev1.VolumeAttachment) { va.Status.Attached = true }))
}

func newExecHarness(t *testing.T, timeout time.Duration, objs ...runtime.Object) *execHarness {
	t.Helper()
	h := &execHarness{
		client:   fake.NewClientset(objs...),
		vas:      toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{}),
		actual:   cache.NewActualState(),
		nodes:    cache.NewNodes(),
		log:      &orderLog{},
		recorder: record.NewFakeRecorder(10),
		metrics:  metrics.New(),
		done:     make(chan volumename.UniqueName, 10),
	}
	h.status = &fakeNodeStatus{actual: h.actual, log: h.log, node: &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: testNode, Annotations: map[string]string{cache.ManagedAnnotation: "true"}},
		Status:     v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}},
	}}
	h.client.PrependReactor("create", "volumeattachments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		va := a.(clienttesting.CreateAction).GetObject().(*storagev1.VolumeAttachment)
		va.UID = vaUID
		h.log.add("create " + va.Name)
		h.mu.Lock()
		defer h.mu.Unlock()
		h.created = append(h.created, va.DeepCopy())
		if h.createErr != nil {
			if h.createApplies {
				if err := h.client.Tracker().Create(vaResource, va.DeepCopy(), ""); err != nil {
					t.Error(err)
				}
			}
			return true, nil, h.createErr
		}
		if h.informerSeesCreates {
			if err := h.vas.Add(va.DeepCopy()); err != nil {
				t.Error(err)
			}
		}
		return false, nil, nil
	})
	h.client.PrependReactor("delete", "volumeattachments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		d := a.(clienttesting.DeleteAction)
		h.log.add("delete " + d.GetName())
		h.mu.Lock()
		defer h.mu.Unlock()
		h.deletes = append(h.deletes, d)
		if h.deleteErr != nil && !h.deleteApplies {
			return true, nil, h.deleteErr
		}
		if err := h.client.Tracker().Delete(vaResource, "", d.GetName()); err != nil {
			return true, nil, err
		}
		if h.informerSeesDeletes {
			if obj, ok, _ := h.vas.GetByKey(d.GetName()); ok {
				if err := h.vas.Delete(obj); err != nil {
					t.Error(err)
				}
			}
		}
		return true, nil, h.deleteErr
	})
	h.client.PrependReactor("get", "volumeattachments", func(clienttesting.Action) (bool, runtime.Object, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.getErr != nil {
			return true, nil, h.getErr
		}
		return false, nil, nil
	})
	// The API server's node is the one Confirm returns.
	h.client.PrependReactor("get", "nodes", func(a clienttesting.Action) (bool, runtime.Object, error) {
		h.status.mu.Lock()
		defer h.status.mu.Unlock()
		if h.status.node == nil {
			return true, nil, apierrors.NewNotFound(v1.Resource("nodes"), a.(clienttesting.GetAction).GetName())
		}
		return true, h.status.node.DeepCopy(), nil
	})
	h.exec = New(Config{
		Client:     h.client,
		VALister:   storagelisters.NewVolumeAttachmentLister(h.vas),
		Actual:     h.actual,
		Nodes:      h.nodes,
		NodeStatus: h.status,
		Events:     podevents.NewEmitter(h.recorder),
		Metrics:    h.metrics,
		Timeout:    timeout,
		Wanted:     h,
		Pods:       h,
		Done:       h,
	})
	// Operations run on contexts the tests give them, which end with the test;
	// the next test starts once they have all ended.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := h.exec.Wait(ctx); err != nil {
			t.Errorf("operations still running after the test: %v", err)
		}
	})
	return h
}

// deleteCount returns how many deletes were sent.
// IsDesired answers Config.Wanted with h.wanted, recording how many Confirm
// calls came before.
func (h *execHarness) IsDesired(volumename.UniqueName, string) bool {
	confirms := h.status.confirmCount()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.confirmsAtWanted = append(h.confirmsAtWanted, confirms)
	return h.wanted
}

// NeededOnNode answers Config.Pods with h.neededOnNode and h.readPodsErr.
func (h *execHarness) NeededOnNode(context.Context, volumename.UniqueName, string) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.neededOnNode, h.readPodsErr
}

// Enqueue passes the volume of an ended operation to h.done.
func (h *execHarness) Enqueue(v volumename.UniqueName) { h.done <- v }

func (h *execHarness) deleteCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.deletes)
}

// anyRunning tells whether any operation on the volume holds a lock.
func (h *execHarness) anyRunning(vol volumename.UniqueName) bool {
	h.exec.locks.mu.Lock()
	defer h.exec.locks.mu.Unlock()
	return len(h.exec.locks.running[vol]) > 0
}

func (h *execHarness) waitDone(t *testing.T) {
	t.Helper()
	h.waitDoneFor(t, testPV.Name)
}

func (h *execHarness) waitDoneFor(t *testing.T, vol volumename.UniqueName) {
	t.Helper()
	select {
	case v := <-h.done:
		if v != vol {
			t.Errorf("Done(%s), want Done(%s)", v, vol)
		}
	case <-time.After(waitLimit):
		t.Fatal("operation did not end")
	}
}

// waitWaiting returns once the operation waits for news of the VolumeAttachment,
// and fails if it ends first.
func (h *execHarness) waitWaiting(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for time.Now().Before(deadline) {
		if h.exec.WaitsFor(name) {
			return
		}
		select {
		case <-h.done:
			t.Fatalf("operation ended before waiting for VolumeAttachment %s; events %q", name, h.events())
		case <-time.After(time.Millisecond):
		}
	}
	t.Fatalf("operation never waited for VolumeAttachment %s", name)
}

func (h *execHarness) events() []string { return fakeevents.Drain(h.recorder) }

func (h *execHarness) backingOff(vol volumename.UniqueName, node string) bool {
	h.exec.locks.mu.Lock()
	defer h.exec.locks.mu.Unlock()
	_, ok := h.exec.locks.backoff[pairKey{vol, node}]
	return ok
}

func withStatus(va *storagev1.VolumeAttachment, mutate func(*storagev1.VolumeAttachment)) *storagev1.VolumeAttachment {
	out := va.DeepCopy()
	mutate(out)
	return out
}

func TestAttachCreatesVolumeAttachment(t *testing.T) {
	inlineSpec := &v1.PersistentVolumeSpec{
		AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		PersistentVolumeSource: v1.PersistentVolumeSource{
			CSI: &v1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: testHandle, FSType: "ext4"},
		},
	}
	inline := testPV
	inline.PVName = ""
	inline.DisplayName = "disk"
	inline.InlineSpec = inlineSpec
	pvName := "pv-1"
	tests := []struct {
		name string
		vol  cache.Volume
		want storagev1.VolumeAttachmentSource
	}{
		{"PersistentVolume", testPV, storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName}},
		{"inline volume migrated to CSI", inline, storagev1.VolumeAttachmentSource{InlineVolumeSpec: inlineSpec}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, time.Minute)
			h.informerSeesCreates = true
			if err := h.exec.Attach(t.Context(), tc.vol, testNode, testPods); err != nil {
				t.Fatalf("Attach: %v", err)
			}
			h.waitWaiting(t, testVAName)
			h.mu.Lock()
			created := h.created
			h.mu.Unlock()
			if len(created) != 1 {
				t.Fatalf("created %d VolumeAttachments, want 1", len(created))
			}
			va := created[0]
			if va.Name != testVAName {
				t.Errorf("name = %q, want %q", va.Name, testVAName)
			}
			if va.Spec.Attacher != testDriver || va.Spec.NodeName != testNode {
				t.Errorf("attacher %q nodeName %q, want %q %q", va.Spec.Attacher, va.Spec.NodeName, testDriver, testNode)
			}
			if !equality.Semantic.DeepEqual(va.Spec.Source, tc.want) {
				t.Errorf("source = %+v, want %+v", va.Spec.Source, tc.want)
			}
			on, ok := h.actual.Get(tc.vol.Name, testNode)
			if !ok || len(on.Objects) != 1 || on.Objects[0].VolumeAttachment != testVAName || on.Objects[0].UID != vaUID || on.Attached() {
				t.Errorf("actual state after create = %+v, %v, want the new, not yet attached object", on, ok)
			}
			h.exec.ObserveVolumeAttachment(testVAName, withStatus(va, func(va *storagev1.VolumeAttachment) { va.Status.Attached = true }))
			h.waitDone(t)
		})
	}
}

func TestAttachOutcome(t *testing.T) {
	tests := []struct {
		name    string
		timeout time.Duration
		// observe is what the informer delivers once the operation waits; nil
		// delivers nothing.
		observe   func(va *storagev1.VolumeAttachment) *storagev1.VolumeAttachment
		wantEvent string
	}{
		{
			name:    "attached",
			timeout: time.Minute,
			observe: func(va *storagev1.VolumeAttachment) *storagev1.VolumeAttachment {
				return withStatus(va, func(va *storagev1.VolumeAttachment) { va.Status.Attached = true })
			},
			wantEvent: `Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "pv-1" `,
		},
		{
			name:    "attach error",
			timeout: time.Minute,
			observe: func(va *storagev1.VolumeAttachment) *storagev1.VolumeAttachment {
				return withStatus(va, func(va *storagev1.VolumeAttachment) {
					va.Status.AttachError = &storagev1.VolumeError{Message: "rpc error: code = NotFound desc = no disk vol-0123"}
				})
			},
			wantEvent: `Warning FailedAttachVolume AttachVolume.Attach failed for volume "pv-1" : rpc error: code = NotFound desc = no disk vol-0123`,
		},
		{
			name:    "deleted while waiting",
			timeout: time.Minute,
			observe: func(*storagev1.VolumeAttachment) *storagev1.VolumeAttachment { return nil },
			wantEvent: `Warning FailedAttachVolume AttachVolume.Attach failed for volume "pv-1" : VolumeAttachment ` +
				testVAName + ` was deleted before it was attached`,
		},
		{
			name:    "being deleted while waiting",
			timeout: time.Minute,
			observe: func(va *storagev1.VolumeAttachment) *storagev1.VolumeAttachment {
				return withStatus(va, func(va *storagev1.VolumeAttachment) {
					now := metav1.Now()
					va.DeletionTimestamp = &now
				})
			},
			wantEvent: `Warning FailedAttachVolume AttachVolume.Attach failed for volume "pv-1" : VolumeAttachment ` +
				testVAName + ` is being deleted`,
		},
		{
			name:    "timed out",
			timeout: 50 * time.Millisecond,
			wantEvent: `Warning FailedAttachVolume AttachVolume.Attach failed for volume "pv-1" : timed out after 50ms ` +
				`waiting for the external-attacher of example.csi.k8s.io to attach VolumeAttachment ` + testVAName,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, tc.timeout)
			h.informerSeesCreates = true
			if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
				t.Fatalf("Attach: %v", err)
			}
			if tc.observe != nil {
				h.waitWaiting(t, testVAName)
				va, err := h.client.StorageV1().VolumeAttachments().Get(t.Context(), testVAName, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				h.exec.ObserveVolumeAttachment(testVAName, tc.observe(va))
			}
			h.waitDone(t)
			if got := h.events(); !slices.Equal(got, []string{tc.wantEvent}) {
				t.Errorf("events = %q, want %q", got, tc.wantEvent)
			}
			failed := strings.HasPrefix(tc.wantEvent, "Warning")
			if h.backingOff(testPV.Name, testNode) != failed {
				t.Errorf("backing off = %v, want %v", !failed, failed)
			}
			if h.anyRunning(testPV.Name) {
				t.Error("lock still held after the operation ended")
			}
		})
	}
}

func TestAttachToExistingAttachedVolumeAttachment(t *testing.T) {
	existing := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: testVAName, UID: vaUID},
		Spec:       storagev1.VolumeAttachmentSpec{Attacher: testDriver, NodeName: testNode},
		Status:     storagev1.VolumeAttachmentStatus{Attached: true},
	}
	h := newExecHarness(t, time.Minute, existing)
	if err := h.vas.Add(existing); err != nil {
		t.Fatal(err)
	}
	if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	h.waitDone(t)
	want := `Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "pv-1" `
	if got := h.events(); !slices.Equal(got, []string{want}) {
		t.Errorf("events = %q, want %q", got, want)
	}
}

// TestAttachBeforeTheInformerSeesTheNewObject: right after Create the informer
// does not hold the object yet; that is no reason to fail the attach.
func TestAttachBeforeTheInformerSeesTheNewObject(t *testing.T) {
	h := newExecHarness(t, time.Minute)
	if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	h.waitWaiting(t, testVAName)
	h.attachCreated(t)
	h.waitDone(t)
	want := `Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "pv-1" `
	if got := h.events(); !slices.Equal(got, []string{want}) {
		t.Errorf("events = %q, want %q", got, want)
	}
}

// TestAttachAfterTheInformerSawTheObjectAttached: csi-attacher can attach the new
// object, and the informer record that, before Create returns to the operation; the
// operation must not then overwrite the attached state with the bare new object.
func TestAttachAfterTheInformerSawTheObjectAttached(t *testing.T) {
	h := newExecHarness(t, time.Minute)
	h.client.PrependReactor("create", "volumeattachments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		va := withStatus(a.(clienttesting.CreateAction).GetObject().(*storagev1.VolumeAttachment), func(va *storagev1.VolumeAttachment) {
			va.UID = vaUID
			va.Status.Attached = true
		})
		if err := h.vas.Add(va); err != nil {
			t.Error(err)
		}
		h.actual.Observe(cache.Observation{Volume: testPV.Name, Node: testNode, VolumeAttachment: va.Name, UID: vaUID, Attached: true})
		return false, nil, nil
	})
	if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	h.waitDone(t)
	if att, ok := h.actual.Get(testPV.Name, testNode); !ok || !att.Attached() {
		t.Errorf("actual state %+v after the attach, want the attached state the informer recorded", att)
	}
}

func TestAttachCreateFails(t *testing.T) {
	h := newExecHarness(t, time.Minute)
	h.createErr = apierrors.NewForbidden(storagev1.Resource("volumeattachments"), testVAName, errors.New("denied"))
	if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	h.waitDone(t)
	got := h.events()
	if len(got) != 1 || !strings.HasPrefix(got[0], `Warning FailedAttachVolume AttachVolume.Attach failed for volume "pv-1" : creating VolumeAttachment `+testVAName) {
		t.Errorf("events = %q, want a FailedAttachVolume event naming the create error", got)
	}
	if _, ok := h.actual.Get(testPV.Name, testNode); ok {
		t.Error("actual state records an attachment whose object was never created")
	}
	var backoff *BackoffError
	if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); !errors.As(err, &backoff) {
		t.Errorf("Attach right after a failure = %v, want a BackoffError", err)
	}
}

func TestOperationsExclusion(t *testing.T) {
	h := newExecHarness(t, time.Minute)
	h.informerSeesCreates = true
	if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	h.waitWaiting(t, testVAName)
	if err := h.exec.Attach(t.Context(), testPV, "node-2", testPods); !errors.Is(err, ErrPending) {
		t.Errorf("second attach of a single-attach volume = %v, want ErrPending", err)
	}
	on := cache.OnNode{Volume: testPV.Name, Node: "node-2", Objects: []cache.Attachment{{Volume: testPV.Name, Node: "node-2", VolumeAttachment: "other"}}}
	if err := h.exec.Detach(t.Context(), on, cache.NotForced); !errors.Is(err, ErrPending) {
		t.Errorf("detach of a single-attach volume during an attach = %v, want ErrPending", err)
	}
	if !h.exec.IsRunning(testPV.Name, "node-2") || !h.exec.IsRunning(testPV.Name, testNode) || !h.anyRunning(testPV.Name) {
		t.Error("IsRunning false during an attach of a single-attach volume")
	}
	h.attachCreated(t)
	h.waitDone(t)
}

// attachedObject is an attached VolumeAttachment of testPV on testNode.
func attachedObject() *storagev1.VolumeAttachment {
	pv := testPV.PVName
	return &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: testVAName, UID: vaUID, ResourceVersion: "5"},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: testDriver, NodeName: testNode,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv},
		},
		Status: storagev1.VolumeAttachmentStatus{Attached: true},
	}
}

// newDetachHarness sets up an attached volume known to the server, the informer
// and the actual state, and returns what is on the node to detach.
func newDetachHarness(t *testing.T, timeout time.Duration) (*execHarness, cache.OnNode) {
	t.Helper()
	h := newExecHarness(t, timeout, attachedObject())
	if err := h.vas.Add(attachedObject()); err != nil {
		t.Fatal(err)
	}
	h.actual.Observe(cache.Observation{Volume: testPV.Name, Node: testNode, VolumeAttachment: testVAName, UID: vaUID, Attached: true})
	on, _ := h.actual.Get(testPV.Name, testNode)
	return h, on
}

func TestDetachSuccess(t *testing.T) {
	h, att := newDetachHarness(t, time.Minute)
	if err := h.exec.Detach(t.Context(), att, cache.NotForced); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	h.waitWaiting(t, testVAName)

	if got, want := h.log.get(), []string{"confirm " + testNode, "delete " + testVAName}; !slices.Equal(got, want) {
		t.Errorf("requests = %q, want %q (node status written before the delete)", got, want)
	}
	h.status.mu.Lock()
	reported := h.status.reportedAtConfirm
	h.status.mu.Unlock()
	if len(reported) != 1 || slices.Contains(reported[0], testPV.Name) {
		t.Errorf("node status at Confirm would list %q, want the volume left out", reported)
	}
	h.mu.Lock()
	deletes := h.deletes
	h.mu.Unlock()
	if len(deletes) != 1 {
		t.Fatalf("%d deletes, want 1", len(deletes))
	}
	pre := deletes[0].GetDeleteOptions().Preconditions
	if pre == nil || pre.UID == nil || *pre.UID != vaUID {
		t.Errorf("delete preconditions = %+v, want uid %s", pre, vaUID)
	}
	if got, _ := h.actual.Get(testPV.Name, testNode); !got.Deleting() || got.Reported() {
		t.Errorf("attachment during the wait = %+v, want deleting and not reported", got)
	}

	select {
	case <-h.done:
		t.Fatal("detach ended before the VolumeAttachment was gone")
	default:
	}
	h.exec.ObserveVolumeAttachment(testVAName, withStatus(attachedObject(), func(va *storagev1.VolumeAttachment) {
		now := metav1.Now()
		va.DeletionTimestamp = &now
	}))
	select {
	case <-h.done:
		t.Fatal("detach ended while the VolumeAttachment was only being deleted")
	case <-time.After(20 * time.Millisecond):
	}
	h.exec.ObserveVolumeAttachment(testVAName, nil)
	h.waitDone(t)
	if h.backingOff(testPV.Name, testNode) {
		t.Error("backing off after a successful detach")
	}
	if got := h.status.enqueuedNodes(); len(got) != 0 {
		t.Errorf("node status enqueued %q after a successful detach, want nothing", got)
	}
	if got := h.events(); len(got) != 0 {
		t.Errorf("events = %q, want none", got)
	}
}

func TestDetachOutcome(t *testing.T) {
	tests := []struct {
		name    string
		timeout time.Duration
		// confirmErr makes the node status write fail.
		confirmErr error
		// deleteErr makes the delete request fail.
		deleteErr error
		// observe is what the informer delivers once the operation waits; nil
		// delivers nothing.
		observe    func() *storagev1.VolumeAttachment
		wantLog    []string
		wantFailed bool
	}{
		{
			name:       "node status write fails: no delete",
			timeout:    time.Minute,
			confirmErr: errors.New("node status patch refused"),
			wantLog:    []string{"confirm " + testNode},
			wantFailed: true,
		},
		{
			name:       "delete refused by the uid precondition",
			timeout:    time.Minute,
			deleteErr:  apierrors.NewConflict(storagev1.Resource("volumeattachments"), testVAName, errors.New("uid mismatch")),
			wantLog:    []string{"confirm " + testNode, "delete " + testVAName},
			wantFailed: true,
		},
		{
			name:       "delete fails",
			timeout:    time.Minute,
			deleteErr:  apierrors.NewServiceUnavailable("try later"),
			wantLog:    []string{"confirm " + testNode, "delete " + testVAName},
			wantFailed: true,
		},
		{
			name:    "external-attacher reports a detach error",
			timeout: time.Minute,
			observe: func() *storagev1.VolumeAttachment {
				return withStatus(attachedObject(), func(va *storagev1.VolumeAttachment) {
					va.Status.DetachError = &storagev1.VolumeError{Message: "rpc error: code = Internal desc = busy"}
				})
			},
			wantLog:    []string{"confirm " + testNode, "delete " + testVAName},
			wantFailed: true,
		},
		{
			name:       "VolumeAttachment still there at the timeout",
			timeout:    50 * time.Millisecond,
			wantLog:    []string{"confirm " + testNode, "delete " + testVAName},
			wantFailed: true,
		},
		{
			name:    "replaced by a new object of the same name",
			timeout: time.Minute,
			observe: func() *storagev1.VolumeAttachment {
				return withStatus(attachedObject(), func(va *storagev1.VolumeAttachment) { va.UID = "new-uid" })
			},
			wantLog: []string{"confirm " + testNode, "delete " + testVAName},
		},
		{
			name:    "gone",
			timeout: time.Minute,
			observe: func() *storagev1.VolumeAttachment { return nil },
			wantLog: []string{"confirm " + testNode, "delete " + testVAName},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, att := newDetachHarness(t, tc.timeout)
			h.status.err = tc.confirmErr
			h.deleteErr = tc.deleteErr
			if err := h.exec.Detach(t.Context(), att, cache.NotForced); err != nil {
				t.Fatalf("Detach: %v", err)
			}
			if tc.observe != nil {
				h.waitWaiting(t, testVAName)
				h.exec.ObserveVolumeAttachment(testVAName, tc.observe())
			}
			h.waitDone(t)
			if got := h.log.get(); !slices.Equal(got, tc.wantLog) {
				t.Errorf("requests = %q, want %q", got, tc.wantLog)
			}
			if got := h.backingOff(testPV.Name, testNode); got != tc.wantFailed {
				t.Errorf("backing off = %v, want %v", got, tc.wantFailed)
			}
			got, _ := h.actual.Get(testPV.Name, testNode)
			enqueued := h.status.enqueuedNodes()
			if tc.wantFailed {
				if !got.Reported() {
					t.Errorf("attachment after a failed detach = %+v, want reported as attached again", got)
				}
				if !slices.Equal(enqueued, []string{testNode}) {
					t.Errorf("node status enqueued %q, want [%s] to list the volume again", enqueued, testNode)
				}
				return
			}
			if got.Reported() {
				t.Errorf("attachment after a detach = %+v, want not reported", got)
			}
			if len(enqueued) != 0 {
				t.Errorf("node status enqueued %q, want nothing", enqueued)
			}
		})
	}
}

func TestDetachAlreadyGoneFromTheInformer(t *testing.T) {
	h, _ := newDetachHarness(t, time.Minute)
	// A multi-attach volume: the detach holds only the node.
	h.actual.Observe(cache.Observation{Volume: testPV.Name, Node: testNode, VolumeAttachment: testVAName, UID: vaUID, Attached: true, MultiAttach: true})
	att, _ := h.actual.Get(testPV.Name, testNode)
	if err := h.vas.Delete(attachedObject()); err != nil {
		t.Fatal(err)
	}
	if err := h.exec.Detach(t.Context(), att, cache.NotForced); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	h.waitDone(t)
	if h.backingOff(testPV.Name, testNode) {
		t.Error("backing off after a detach of an object already gone")
	}
}

// TestDetachCalledOffWhenNodeReportsInUse: once node status no longer lists the
// volume, the node as written is checked again; a volume kubelet reported in use
// meanwhile is not detached, unless the detach is forced (here by the
// out-of-service taint the node carries).
func TestDetachCalledOffWhenNodeReportsInUse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		force   cache.ForceRule
		deletes int
	}{
		{name: "not forced", force: cache.NotForced, deletes: 0},
		{name: "forced", force: cache.ForcedOutOfService, deletes: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, att := newDetachHarness(t, time.Minute)
			h.status.node = &v1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: testNode, Annotations: map[string]string{cache.ManagedAnnotation: "true"}},
				Spec:       v1.NodeSpec{Taints: []v1.Taint{{Key: cache.OutOfServiceTaint, Effect: v1.TaintEffectNoExecute}}},
				Status:     v1.NodeStatus{VolumesInUse: []v1.UniqueVolumeName{v1.UniqueVolumeName(testPV.Name)}},
			}
			if err := h.exec.Detach(t.Context(), att, tc.force); err != nil {
				t.Fatalf("Detach: %v", err)
			}
			if tc.force != cache.NotForced {
				h.waitWaiting(t, testVAName)
				h.exec.ObserveVolumeAttachment(testVAName, nil)
			}
			h.waitDone(t)
			h.mu.Lock()
			deletes := len(h.deletes)
			h.mu.Unlock()
			if deletes != tc.deletes {
				t.Fatalf("%d deletes, want %d", deletes, tc.deletes)
			}
			if tc.force == cache.NotForced {
				if got, _ := h.actual.Get(testPV.Name, testNode); !got.Reported() {
					t.Errorf("attachment after the called-off detach = %+v, want reported again", got)
				}
				if !h.backingOff(testPV.Name, testNode) {
					t.Error("no backoff after a called-off detach")
				}
			}
		})
	}
}

// TestAttachWaitsWhileTheStateMayLackAVolumeAttachment: while the actual state
// may lack a VolumeAttachment that exists (the informer stopped watching), no
// node is known not to hold a single-attach volume, so its attach does not start;
// a multi-attach volume's does, and so does that of an in-tree iSCSI volume, whose
// only records are the controller's own and node status.
func TestAttachWaitsWhileTheStateMayLackAVolumeAttachment(t *testing.T) {
	multi := testPV
	multi.MultiAttach = true
	tests := []struct {
		name        string
		vol         cache.Volume
		wantStarted bool
	}{
		{"single-attach", testPV, false},
		{"multi-attach", multi, true},
		{"in-tree iSCSI, which has no VolumeAttachment", cache.Volume{Name: volumename.ISCSI("10.0.0.1:3260", "iqn.x", 0)}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, time.Minute)
			h.informerSeesCreates = true
			h.actual.SetIncomplete("the informer stopped watching")
			err := h.exec.Attach(t.Context(), tc.vol, testNode, testPods)
			var unknown *HoldersUnknownError
			switch {
			case tc.wantStarted && err != nil:
				t.Fatalf("Attach = %v, want it started", err)
			case !tc.wantStarted && (!errors.As(err, &unknown) || unknown.Reason != "the informer stopped watching"):
				t.Fatalf("Attach = %v, want a *HoldersUnknownError with the state's reason", err)
			case tc.wantStarted && volumename.ReportOnly(tc.vol.Name):
				if _, ok := h.actual.Get(tc.vol.Name, testNode); !ok {
					t.Errorf("%s is not recorded attached to %s", tc.vol.Name, testNode)
				}
			case tc.wantStarted:
				h.waitWaiting(t, testVAName)
				h.mu.Lock()
				created := h.created[0]
				h.mu.Unlock()
				h.exec.ObserveVolumeAttachment(testVAName, withStatus(created, func(va *storagev1.VolumeAttachment) { va.Status.Attached = true }))
				h.waitDone(t)
			}
			if h.exec.IsRunning(tc.vol.Name, testNode) {
				t.Errorf("an operation still runs on %s", testNode)
			}
		})
	}
}

// TestAttachWaitsPastAnOlderObjectOfItsName: an informer that lags may still
// hold an older object of the name the attach has just created, being deleted.
// That object is not the attach's: the attach waits for its own (soak seed
// 48060, where it failed the attach, and an attach to another node followed).
func TestAttachWaitsPastAnOlderObjectOfItsName(t *testing.T) {
	h := newExecHarness(t, time.Minute)
	older := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: testVAName, UID: "uid-older", DeletionTimestamp: &metav1.Time{Time: time.Now()}}}
	if err := h.vas.Add(older); err != nil {
		t.Fatal(err)
	}
	if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	h.waitWaiting(t, testVAName)
	h.exec.ObserveVolumeAttachment(testVAName, older)
	h.exec.ObserveVolumeAttachment(testVAName, nil)
	h.attachCreated(t)
	h.waitDone(t)
	want := `Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "pv-1" `
	if got := h.events(); !slices.Equal(got, []string{want}) {
		t.Errorf("events = %q, want %q", got, want)
	}
}

// settlingAny tells whether a read-back of any object runs.
func (h *execHarness) settlingAny() bool {
	h.exec.mu.Lock()
	defer h.exec.mu.Unlock()
	return len(h.exec.settling) > 0
}
