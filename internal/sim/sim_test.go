package sim

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{}, func(e *testenv.Env) { env = e }))
}

const (
	driver      = "sim.csi.example.com"
	waitTimeout = 10 * time.Second
)

func TestUniqueVolumeName(t *testing.T) {
	if got, want := UniqueVolumeName("a.b/c", "vol^1"), "kubernetes.io/csi/a.b/c^vol^1"; got != want {
		t.Errorf("UniqueVolumeName = %q, want %q", got, want)
	}
}

func TestAttachmentName(t *testing.T) {
	// sha256("vol-1" + "csi.example.com" + "node-1"), as sha256sum prints it.
	want := "csi-b74c7fc125891ffa0d0f2e0d645733e3fae7fba3066e76500a771ea08be9da28"
	if got := AttachmentName("csi.example.com", "vol-1", "node-1"); got != want {
		t.Errorf("AttachmentName = %q, want %q", got, want)
	}
}

func TestAttacherFinalizer(t *testing.T) {
	for driver, want := range map[string]string{
		"csi.example.com":  "external-attacher/csi-example-com",
		"a_b/c~d-e9":       "external-attacher/a-b-c-d-e9",
		"plain-driver-123": "external-attacher/plain-driver-123",
	} {
		if got := AttacherFinalizer(driver); got != want {
			t.Errorf("AttacherFinalizer(%q) = %q, want %q", driver, got, want)
		}
	}
}

func waitFor(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, waitTimeout, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func createNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := env.Client.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
}

// createBoundClaim creates a CSI PV with the given handle and a claim bound to it.
func createBoundClaim(t *testing.T, namespace, claim, pvName, handle string) {
	t.Helper()
	ctx := t.Context()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle}},
			ClaimRef:               &corev1.ObjectReference{Namespace: namespace, Name: claim},
		},
	}
	if _, err := env.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating PV: %v", err)
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: claim},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			VolumeName:  pvName,
		},
	}
	if _, err := env.Client.CoreV1().PersistentVolumeClaims(namespace).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating PVC: %v", err)
	}
}

func createPod(t *testing.T, namespace, name, node string, volumes ...corev1.Volume) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "app", Image: "busybox"}},
			Volumes:    volumes,
		},
	}
	created, err := env.Client.CoreV1().Pods(namespace).Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod: %v", err)
	}
	return created
}

func claimVolume(name, claim string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

func ephemeralVolume(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
		VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		}},
	}}}
}

func deletePod(t *testing.T, pod *corev1.Pod, grace *int64) {
	t.Helper()
	if err := env.Client.CoreV1().Pods(pod.Namespace).Delete(t.Context(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: grace}); err != nil {
		t.Fatalf("deleting pod: %v", err)
	}
}

func startKubelet(t *testing.T, opts KubeletOptions) *Kubelet {
	t.Helper()
	k, err := StartKubelet(t.Context(), env.AdminConfig(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestKubeletVolumesInUse(t *testing.T) {
	const ns, node = "kubelet-in-use", "kubelet-in-use-node"
	const unmountDelay = 300 * time.Millisecond
	createNamespace(t, ns)
	k := startKubelet(t, KubeletOptions{Nodes: []string{node}, CreateNodes: true, UnmountDelay: unmountDelay})

	created, err := env.Client.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading node: %v", err)
	}
	if created.Annotations[ControllerManagedAnnotation] != "true" || !Ready(created) {
		t.Fatalf("node annotations %v, ready %t: want controller-managed and ready", created.Annotations, Ready(created))
	}

	createBoundClaim(t, ns, "data", "kubelet-in-use-pv", "handle^with^carets")
	createBoundClaim(t, ns, "pod-scratch", "kubelet-in-use-ephemeral-pv", "scratch")
	pod := createPod(t, ns, "pod", node, claimVolume("data", "data"), ephemeralVolume("scratch"))
	vols := []string{UniqueVolumeName(driver, "handle^with^carets"), UniqueVolumeName(driver, "scratch")}
	for _, vol := range vols {
		if err := k.WaitInUse(t.Context(), node, vol, true); err != nil {
			t.Fatal(err)
		}
	}

	deleted := time.Now()
	deletePod(t, pod, new(int64(0)))
	for _, vol := range vols {
		if err := k.WaitInUse(t.Context(), node, vol, false); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(deleted); took < unmountDelay {
		t.Errorf("volumes left volumesInUse %v after the pod was deleted, before the unmount delay %v", took, unmountDelay)
	}
}

func TestKubeletStuckVolumeAndReadiness(t *testing.T) {
	const node = "kubelet-stuck-node"
	k := startKubelet(t, KubeletOptions{Nodes: []string{node}, CreateNodes: true})
	vol := UniqueVolumeName(driver, "stuck")
	if err := k.SetStuck(node, vol, true); err != nil {
		t.Fatal(err)
	}
	if err := k.WaitInUse(t.Context(), node, vol, true); err != nil {
		t.Fatal(err)
	}
	if err := k.SetReady(t.Context(), node, false); err != nil {
		t.Fatal(err)
	}
	before, err := env.Client.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading node: %v", err)
	}
	if inUse := slices.Contains(before.Status.VolumesInUse, corev1.UniqueVolumeName(vol)); Ready(before) || !inUse {
		t.Fatalf("node ready %t, volume in use %t: want not ready, in use", Ready(before), inUse)
	}
	// Nothing changes: the node status is left alone.
	time.Sleep(200 * time.Millisecond)
	after, err := env.Client.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading node: %v", err)
	}
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("node written while nothing changed: resourceVersion %s -> %s", before.ResourceVersion, after.ResourceVersion)
	}
	if err := k.SetStuck(node, vol, false); err != nil {
		t.Fatal(err)
	}
	if err := k.WaitInUse(t.Context(), node, vol, false); err != nil {
		t.Fatal(err)
	}
}

// setAttached writes node.status.volumesAttached the way the controller does.
func setAttached(t *testing.T, node string, vols ...string) {
	t.Helper()
	var entries []string
	for _, v := range vols {
		entries = append(entries, fmt.Sprintf(`{"name":%q,"devicePath":""}`, v))
	}
	patch := fmt.Sprintf(`{"status":{"volumesAttached":[%s]}}`, strings.Join(entries, ","))
	if _, err := env.Client.CoreV1().Nodes().Patch(t.Context(), node, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("patching volumesAttached: %v", err)
	}
}

func TestKubeletManagesPods(t *testing.T) {
	const ns, node = "kubelet-pods", "kubelet-pods-node"
	createNamespace(t, ns)
	mounts := NewMounts()
	k := startKubelet(t, KubeletOptions{Nodes: []string{node}, CreateNodes: true, ManagePods: true, UnmountDelay: 100 * time.Millisecond, Mounts: mounts})
	createBoundClaim(t, ns, "data", "kubelet-pods-pv", "pods")
	vol := UniqueVolumeName(driver, "pods")
	pod := createPod(t, ns, "pod", node, claimVolume("data", "data"))
	phase := func(ctx context.Context) corev1.PodPhase {
		p, err := env.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return p.Status.Phase
	}
	if err := k.WaitInUse(t.Context(), node, vol, true); err != nil {
		t.Fatal(err)
	}
	setAttached(t, node, vol)
	if err := k.WaitAttached(t.Context(), node, vol, true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if got := phase(t.Context()); got == corev1.PodRunning || mounts.Mounted(node, vol) {
		t.Fatalf("pod is %s, volume mounted %t, before its VolumeAttachment is attached", got, mounts.Mounted(node, vol))
	}

	if _, err := StartAttacher(t.Context(), env.AdminConfig(), AttacherOptions{Drivers: []string{driver}}); err != nil {
		t.Fatal(err)
	}
	createAttachment(t, AttachmentName(driver, "pods", node), "kubelet-pods-pv", node)
	waitFor(t, "pod running", func(ctx context.Context) (bool, error) { return phase(ctx) == corev1.PodRunning, nil })
	if !mounts.Mounted(node, vol) {
		t.Fatalf("pod running with its volume not mounted")
	}

	// A graceful deletion: the simulator stops the containers, unmounts, and removes the pod.
	deletePod(t, pod, nil)
	if err := k.WaitInUse(t.Context(), node, vol, false); err != nil {
		t.Fatal(err)
	}
	if mounts.Mounted(node, vol) {
		t.Errorf("volume left volumesInUse still mounted")
	}
	waitFor(t, "pod gone", func(ctx context.Context) (bool, error) {
		_, err := env.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

func createAttachment(t *testing.T, name, pv, node string) {
	t.Helper()
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: driver,
			NodeName: node,
			Source:   storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv},
		},
	}
	if _, err := env.Client.StorageV1().VolumeAttachments().Create(t.Context(), va, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating volume attachment: %v", err)
	}
}

func getAttachment(ctx context.Context, name string) (*storagev1.VolumeAttachment, error) {
	return env.Client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
}

func TestAttacher(t *testing.T) {
	const ns = "attacher"
	createNamespace(t, ns)
	createBoundClaim(t, ns, "good", "attacher-good", "good-handle")
	createBoundClaim(t, ns, "bad", "attacher-bad", "bad-handle")
	a, err := StartAttacher(t.Context(), env.AdminConfig(), AttacherOptions{Drivers: []string{driver}, AttachDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	a.FailAttach("bad-handle", "injected attach failure")

	createAttachment(t, "attacher-good", "attacher-good", "node-a")
	createAttachment(t, "attacher-bad", "attacher-bad", "node-a")
	waitFor(t, "good attachment attached with finalizer", func(ctx context.Context) (bool, error) {
		va, err := getAttachment(ctx, "attacher-good")
		return err == nil && va.Status.Attached && len(va.Finalizers) == 1 && va.Finalizers[0] == AttacherFinalizer(driver), nil
	})
	waitFor(t, "bad attachment failed", func(ctx context.Context) (bool, error) {
		va, err := getAttachment(ctx, "attacher-bad")
		return err == nil && !va.Status.Attached && va.Status.AttachError != nil && va.Status.AttachError.Message == "injected attach failure", nil
	})

	a.ClearFailures("bad-handle")
	waitFor(t, "bad attachment attached once the failure is cleared", func(ctx context.Context) (bool, error) {
		va, err := getAttachment(ctx, "attacher-bad")
		return err == nil && va.Status.Attached && va.Status.AttachError == nil, nil
	})

	for _, name := range []string{"attacher-good", "attacher-bad"} {
		if err := env.Client.StorageV1().VolumeAttachments().Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting volume attachment: %v", err)
		}
		waitFor(t, name+" gone", func(ctx context.Context) (bool, error) {
			_, err := getAttachment(ctx, name)
			return apierrors.IsNotFound(err), nil
		})
	}
}

func TestAttacherTriesAFailedAttemptAgain(t *testing.T) {
	const ns = "attacher-attempts"
	createNamespace(t, ns)
	createBoundClaim(t, ns, "data", "attacher-attempts", "attempts-handle")
	var mu sync.Mutex
	tries := map[bool]int{}
	_, err := StartAttacher(t.Context(), env.AdminConfig(), AttacherOptions{Drivers: []string{driver}, Attempt: func(detach bool) (time.Duration, bool) {
		mu.Lock()
		defer mu.Unlock()
		tries[detach]++
		return 200 * time.Millisecond, tries[detach] == 1
	}})
	if err != nil {
		t.Fatal(err)
	}
	createAttachment(t, "attacher-attempts", "attacher-attempts", "node-a")
	waitFor(t, "first attach failed", func(ctx context.Context) (bool, error) {
		va, err := getAttachment(ctx, "attacher-attempts")
		return err == nil && va.Status.AttachError != nil && !va.Status.Attached, nil
	})
	waitFor(t, "second attach done", func(ctx context.Context) (bool, error) {
		va, err := getAttachment(ctx, "attacher-attempts")
		return err == nil && va.Status.Attached && va.Status.AttachError == nil, nil
	})
	if err := env.Client.StorageV1().VolumeAttachments().Delete(t.Context(), "attacher-attempts", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting volume attachment: %v", err)
	}
	waitFor(t, "first detach failed", func(ctx context.Context) (bool, error) {
		va, err := getAttachment(ctx, "attacher-attempts")
		return err == nil && va.Status.DetachError != nil && va.Status.Attached, nil
	})
	waitFor(t, "gone after the second detach", func(ctx context.Context) (bool, error) {
		_, err := getAttachment(ctx, "attacher-attempts")
		return apierrors.IsNotFound(err), nil
	})
	mu.Lock()
	defer mu.Unlock()
	if tries[false] != 2 || tries[true] != 2 {
		t.Errorf("attempts: %d attaches, %d detaches; want 2 each", tries[false], tries[true])
	}
}

func TestAttacherIgnoresOtherDrivers(t *testing.T) {
	if _, err := StartAttacher(t.Context(), env.AdminConfig(), AttacherOptions{Drivers: []string{"other.csi.example.com"}}); err != nil {
		t.Fatal(err)
	}
	createAttachment(t, "other-driver", "other-driver-pv", "node-a")
	time.Sleep(200 * time.Millisecond)
	va, err := getAttachment(t.Context(), "other-driver")
	if err != nil {
		t.Fatal(err)
	}
	if len(va.Finalizers) != 0 || va.Status.Attached {
		t.Errorf("attacher of another driver touched the attachment: finalizers %v, attached %t", va.Finalizers, va.Status.Attached)
	}
}

// TestAttacherActsOnANewObjectOfTheSameName: the informer can deliver a
// VolumeAttachment's deletion and a new one of the same name before the simulator
// syncs that name again. The new object is attached, not skipped as a stale copy of
// the one the simulator has just let go.
func TestAttacherActsOnANewObjectOfTheSameName(t *testing.T) {
	const name = "recreated"
	pvName := "recreated-pv"
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec:       corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "h"}}},
	}
	attachment := func(uid types.UID, deleting bool) *storagev1.VolumeAttachment {
		va := &storagev1.VolumeAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid, ResourceVersion: "5"},
			Spec:       storagev1.VolumeAttachmentSpec{Attacher: driver, NodeName: "node-a", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName}},
		}
		if deleting {
			va.DeletionTimestamp = &metav1.Time{Time: time.Now()}
			va.Finalizers = []string{AttacherFinalizer(driver)}
			va.Status.Attached = true
		}
		return va
	}
	old, recreated := attachment("old", true), attachment("new", false)
	client := fake.NewClientset(pv, old)
	pvs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	vas := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, err := range []error{pvs.Add(pv), vas.Add(old)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	a := &Attacher{
		client: client, vas: vas, pvs: corelisters.NewPersistentVolumeLister(pvs), queue: newQueue(),
		drivers: map[string]bool{driver: true}, failures: map[string]string{}, pending: map[operation]attempt{}, written: map[string]writtenVersion{},
	}
	if _, err := a.sync(t.Context(), name); err != nil {
		t.Fatalf("detaching the old VolumeAttachment: %v", err)
	}
	// The old object goes and the new one comes before the name is synced again.
	if err := client.Tracker().Delete(storagev1.SchemeGroupVersion.WithResource("volumeattachments"), "", name); err != nil {
		t.Fatal(err)
	}
	if _, err := client.StorageV1().VolumeAttachments().Create(t.Context(), recreated, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := vas.Update(recreated); err != nil {
		t.Fatal(err)
	}
	if _, err := a.sync(t.Context(), name); err != nil {
		t.Fatalf("syncing the new VolumeAttachment: %v", err)
	}
	got, err := client.StorageV1().VolumeAttachments().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got.Finalizers, AttacherFinalizer(driver)) {
		t.Errorf("the new VolumeAttachment was skipped: finalizers %v, want the attacher's", got.Finalizers)
	}
}
