package externalattacher_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"

	"github.com/attachdetach-controller/attachdetach-controller/internal/csidriver"
	"github.com/attachdetach-controller/attachdetach-controller/internal/externalattacher"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
)

const (
	driverName = "hostless.csi.test.example.com"
	// finalizer is what csi-attacher puts on VolumeAttachments and PVs of driverName:
	// every character but letters, digits and '-' turned into '-'.
	finalizer = "external-attacher/hostless-csi-test-example-com"
	// serviceAccount is who csi-attacher runs as, with only the upstream RBAC rules.
	serviceAccount = "csi-attacher"
)

// harness is a control plane with the test driver and csi-attacher running against it.
type harness struct {
	client kubernetes.Interface
	driver *csidriver.Driver
}

func startHarness(t *testing.T) *harness {
	t.Helper()
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver and csi-attacher")
	}
	env := testenv.StartForTest(t, testenv.Options{})
	_, ctx := ktesting.NewTestContext(t)

	dir, err := os.MkdirTemp("", "extattacher")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })

	driver := csidriver.New(driverName)
	srv, err := csidriver.Serve(ctx, driver, filepath.Join(dir, "csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)

	if err := externalattacher.GrantRBAC(ctx, env.Client, metav1.NamespaceDefault, serviceAccount); err != nil {
		t.Fatal(err)
	}
	token, err := env.ServiceAccountToken(ctx, metav1.NamespaceDefault, serviceAccount)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig, token); err != nil {
		t.Fatal(err)
	}

	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	attacher, err := externalattacher.Start(startCtx, externalattacher.Options{
		Kubeconfig:         kubeconfig,
		CSIAddress:         srv.Endpoint(),
		LogFile:            filepath.Join(dir, "csi-attacher.log"),
		Timeout:            5 * time.Second,
		RetryIntervalStart: 100 * time.Millisecond,
		RetryIntervalMax:   time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-registered first: csi-attacher stops before the driver.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("csi-attacher log tail:\n%s", attacher.LogTail(60))
		}
		attacher.Stop()
	})

	h := &harness{client: env.Client, driver: driver}
	attachRequired := true
	csiDriver := &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: driverName},
		Spec:       storagev1.CSIDriverSpec{AttachRequired: &attachRequired},
	}
	if _, err := h.client.StorageV1().CSIDrivers().Create(ctx, csiDriver, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"node-1", "node-2"} {
		h.createNode(t, node)
	}
	return h
}

func nodeID(node string) string { return node + "-id" }

func (h *harness) createNode(t *testing.T, name string) {
	t.Helper()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        name,
		Annotations: map[string]string{sim.ControllerManagedAnnotation: "true"},
	}}
	if _, err := h.client.CoreV1().Nodes().Create(t.Context(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := externalattacher.EnsureCSINode(t.Context(), h.client, name, driverName, nodeID(name)); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) createPV(t *testing.T, name, volumeHandle string, modes ...v1.PersistentVolumeAccessMode) {
	t.Helper()
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{
			Capacity:    v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes: modes,
			PersistentVolumeSource: v1.PersistentVolumeSource{
				CSI: &v1.CSIPersistentVolumeSource{Driver: driverName, VolumeHandle: volumeHandle},
			},
		},
	}
	if _, err := h.client.CoreV1().PersistentVolumes().Create(t.Context(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) createVA(t *testing.T, pvName, volumeHandle, node string) string {
	t.Helper()
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: sim.AttachmentName(driverName, volumeHandle, node)},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: driverName,
			NodeName: node,
			Source:   storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName},
		},
	}
	if _, err := h.client.StorageV1().VolumeAttachments().Create(t.Context(), va, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return va.Name
}

// waitVA polls the VolumeAttachment until cond holds, failing the test on timeout
// with what it last saw.
func (h *harness) waitVA(t *testing.T, name, what string, cond func(*storagev1.VolumeAttachment) bool) *storagev1.VolumeAttachment {
	t.Helper()
	var last *storagev1.VolumeAttachment
	t.Cleanup(func() {
		if t.Failed() && last != nil {
			t.Logf("VolumeAttachment %s last seen with finalizers %v, status %+v", name, last.Finalizers, last.Status)
		}
	})
	suite.Eventually(t, suite.WaitTimeout, fmt.Sprintf("VolumeAttachment %s: %s", name, what), func() bool {
		va, err := h.client.StorageV1().VolumeAttachments().Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		last = va
		return cond(va)
	})
	return last
}

// deleteVA deletes the VolumeAttachment and waits until it is gone, which happens
// only once csi-attacher has detached and removed its finalizer.
func (h *harness) deleteVA(t *testing.T, name string) {
	t.Helper()
	if err := h.client.StorageV1().VolumeAttachments().Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitGone(t, name)
}

func (h *harness) waitGone(t *testing.T, name string) {
	t.Helper()
	suite.Eventually(t, suite.WaitTimeout, fmt.Sprintf("VolumeAttachment %s to go away", name), func() bool {
		_, err := h.client.StorageV1().VolumeAttachments().Get(t.Context(), name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return apierrors.IsNotFound(err)
	})
}

func attached(va *storagev1.VolumeAttachment) bool { return va.Status.Attached }

func hasFinalizer(va *storagev1.VolumeAttachment) bool {
	return slices.Contains(va.Finalizers, finalizer)
}

func codesOf(calls []csidriver.Call) []codes.Code {
	out := make([]codes.Code, 0, len(calls))
	for _, c := range calls {
		out = append(out, c.Code)
	}
	return out
}

// TestExternalAttacher runs the real csi-attacher against the test driver and checks
// the behaviour this project's controller relies on.
func TestExternalAttacher(t *testing.T) {
	h := startHarness(t)

	t.Run("attach and detach", func(t *testing.T) {
		const pv, handle, node = "pv-1", "vol-1", "node-1"
		h.createPV(t, pv, handle, v1.ReadWriteOnce)
		name := h.createVA(t, pv, handle, node)

		va := h.waitVA(t, name, "attached", attached)
		if !hasFinalizer(va) {
			t.Errorf("finalizers %v, want %s", va.Finalizers, finalizer)
		}
		if got := va.Annotations["csi.alpha.kubernetes.io/node-id"]; got != nodeID(node) {
			t.Errorf("node-id annotation %q, want %q", got, nodeID(node))
		}
		if want := map[string]string{csidriver.DevicePathKey: "/dev/csi-test/" + handle}; !reflect.DeepEqual(va.Status.AttachmentMetadata, want) {
			t.Errorf("attachmentMetadata %v, want %v", va.Status.AttachmentMetadata, want)
		}
		if va.Status.AttachError != nil {
			t.Errorf("attachError %+v, want none", va.Status.AttachError)
		}
		if got := h.driver.PublishedNodes(handle); !reflect.DeepEqual(got, []string{nodeID(node)}) {
			t.Errorf("driver has %s published on %v, want [%s]", handle, got, nodeID(node))
		}
		pvObj, err := h.client.CoreV1().PersistentVolumes().Get(t.Context(), pv, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(pvObj.Finalizers, finalizer) {
			t.Errorf("PV finalizers %v, want %s", pvObj.Finalizers, finalizer)
		}

		h.deleteVA(t, name)
		if got := h.driver.PublishedNodes(handle); len(got) != 0 {
			t.Errorf("driver has %s still published on %v after detach", handle, got)
		}
		unpublishes := h.driver.CallsFor(csidriver.OpUnpublish, handle)
		if len(unpublishes) == 0 || unpublishes[len(unpublishes)-1].NodeID != nodeID(node) || unpublishes[len(unpublishes)-1].Code != codes.OK {
			t.Errorf("unpublish calls %+v, want a successful one for %s", unpublishes, nodeID(node))
		}
	})

	t.Run("attach error then recovery", func(t *testing.T) {
		const pv, handle, node = "pv-2", "vol-2", "node-1"
		const message = "no free attachment slots"
		if err := h.driver.SetFault(csidriver.OpPublish, handle, csidriver.Fault{Code: codes.ResourceExhausted, Message: message}); err != nil {
			t.Fatal(err)
		}
		h.createPV(t, pv, handle, v1.ReadWriteOnce)
		name := h.createVA(t, pv, handle, node)

		// The attacher's PV informer may not hold the PV yet at the first try
		// ("persistentvolume not found"): wait for the driver's error.
		va := h.waitVA(t, name, "attachError from the driver", func(va *storagev1.VolumeAttachment) bool {
			return va.Status.AttachError != nil && strings.Contains(va.Status.AttachError.Message, message)
		})
		if va.Status.Attached || !strings.Contains(va.Status.AttachError.Message, message) {
			t.Errorf("status %+v, want not attached with an attachError mentioning %q", va.Status, message)
		}
		if !hasFinalizer(va) {
			t.Errorf("finalizers %v, want %s even before the first successful attach", va.Finalizers, finalizer)
		}

		// The attacher marks a VolumeAttachment attached with a merge patch
		// computed against its informer's copy: from a copy that does not hold
		// the saved attachError yet, the patch leaves the error in place. So one
		// more publish fails after the error shows, before the fault is cleared.
		failed := len(h.driver.CallsFor(csidriver.OpPublish, handle))
		suite.Eventually(t, suite.WaitTimeout, "another publish failing after the attachError shows", func() bool {
			return len(h.driver.CallsFor(csidriver.OpPublish, handle)) > failed
		})
		h.driver.ClearFault(csidriver.OpPublish, handle)
		h.waitVA(t, name, "attached with attachError cleared", func(va *storagev1.VolumeAttachment) bool {
			return va.Status.Attached && va.Status.AttachError == nil
		})
		if got := codesOf(h.driver.CallsFor(csidriver.OpPublish, handle)); len(got) < 2 || got[0] != codes.ResourceExhausted || got[len(got)-1] != codes.OK {
			t.Errorf("publish results %v, want failures then OK", got)
		}
		h.deleteVA(t, name)
	})

	t.Run("detach error keeps the VolumeAttachment", func(t *testing.T) {
		const pv, handle, node = "pv-3", "vol-3", "node-2"
		const message = "backend busy"
		h.createPV(t, pv, handle, v1.ReadWriteOnce)
		name := h.createVA(t, pv, handle, node)
		h.waitVA(t, name, "attached", attached)

		if err := h.driver.SetFault(csidriver.OpUnpublish, handle, csidriver.Fault{Code: codes.Internal, Message: message}); err != nil {
			t.Fatal(err)
		}
		if err := h.client.StorageV1().VolumeAttachments().Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		va := h.waitVA(t, name, "detachError set", func(va *storagev1.VolumeAttachment) bool { return va.Status.DetachError != nil })
		if va.DeletionTimestamp == nil || !hasFinalizer(va) || !va.Status.Attached || !strings.Contains(va.Status.DetachError.Message, message) {
			t.Errorf("VolumeAttachment %+v, want deleting, finalizer kept, still attached, detachError mentioning %q", va, message)
		}
		if got := h.driver.PublishedNodes(handle); !reflect.DeepEqual(got, []string{nodeID(node)}) {
			t.Errorf("driver has %s published on %v, want still on [%s]", handle, got, nodeID(node))
		}

		h.driver.ClearFault(csidriver.OpUnpublish, handle)
		h.waitGone(t, name)
		if got := h.driver.PublishedNodes(handle); len(got) != 0 {
			t.Errorf("driver has %s still published on %v", handle, got)
		}
	})

	t.Run("second node for a single-node volume is refused and recorded", func(t *testing.T) {
		const pv, handle = "pv-4", "vol-4"
		h.createPV(t, pv, handle, v1.ReadWriteOnce)
		first := h.createVA(t, pv, handle, "node-1")
		h.waitVA(t, first, "attached", attached)

		second := h.createVA(t, pv, handle, "node-2")
		va := h.waitVA(t, second, "attachError set", func(va *storagev1.VolumeAttachment) bool { return va.Status.AttachError != nil })
		if va.Status.Attached {
			t.Errorf("second attachment attached: %+v", va.Status)
		}
		conflicts := h.driver.Conflicts()
		if len(conflicts) == 0 || conflicts[0].VolumeID != handle || conflicts[0].NodeID != nodeID("node-2") {
			t.Errorf("conflicts %+v, want %s refused on %s", conflicts, handle, nodeID("node-2"))
		}

		h.deleteVA(t, first)
		h.waitVA(t, second, "attached once the first node let go", attached)
		if got := h.driver.PublishedNodes(handle); !reflect.DeepEqual(got, []string{nodeID("node-2")}) {
			t.Errorf("driver has %s published on %v, want [%s]", handle, got, nodeID("node-2"))
		}
		h.deleteVA(t, second)
	})

	t.Run("multi-node volume on two nodes", func(t *testing.T) {
		const pv, handle = "pv-5", "vol-5"
		h.createPV(t, pv, handle, v1.ReadWriteMany)
		names := []string{h.createVA(t, pv, handle, "node-1"), h.createVA(t, pv, handle, "node-2")}
		for _, name := range names {
			h.waitVA(t, name, "attached", attached)
		}
		if got, want := h.driver.PublishedNodes(handle), []string{nodeID("node-1"), nodeID("node-2")}; !reflect.DeepEqual(got, want) {
			t.Errorf("driver has %s published on %v, want %v", handle, got, want)
		}
		for _, name := range names {
			h.deleteVA(t, name)
		}
	})

	t.Run("node without CSINode is not attached", func(t *testing.T) {
		const pv, handle, node = "pv-7", "vol-7", "node-3"
		h.createPV(t, pv, handle, v1.ReadWriteOnce)
		name := h.createVA(t, pv, handle, node)
		// The attacher's PV informer may not hold the PV yet at the first try
		// ("persistentvolume not found"): wait for the error about the node.
		va := h.waitVA(t, name, "attachError about the node", func(va *storagev1.VolumeAttachment) bool {
			return va.Status.AttachError != nil && !strings.Contains(va.Status.AttachError.Message, "persistentvolume")
		})
		if va.Status.Attached || hasFinalizer(va) {
			t.Errorf("VolumeAttachment %+v, want no finalizer and not attached", va)
		}

		if _, err := externalattacher.EnsureCSINode(t.Context(), h.client, node, driverName, nodeID(node)); err != nil {
			t.Fatal(err)
		}
		h.waitVA(t, name, fmt.Sprintf("attached once CSINode %s exists", node), attached)
		h.deleteVA(t, name)
	})
}
