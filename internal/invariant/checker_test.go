package invariant

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{}, func(e *testenv.Env) { env = e }))
}

const driver = "invariant.csi.example.com"

func startChecker(t *testing.T) *Checker {
	t.Helper()
	c, err := Start(t.Context(), env.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

func createPV(t *testing.T, name string, modes ...corev1.PersistentVolumeAccessMode) {
	t.Helper()
	createPVFrom(t, name, corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: name}}, modes...)
}

func createPVFrom(t *testing.T, name string, source corev1.PersistentVolumeSource, modes ...corev1.PersistentVolumeAccessMode) {
	t.Helper()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes:            modes,
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			PersistentVolumeSource: source,
		},
	}
	if _, err := env.Client.CoreV1().PersistentVolumes().Create(t.Context(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating PV: %v", err)
	}
	t.Cleanup(func() {
		_ = env.Client.CoreV1().PersistentVolumes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

func createNode(t *testing.T, name string) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := env.Client.CoreV1().Nodes().Create(t.Context(), node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating node: %v", err)
	}
	t.Cleanup(func() {
		_ = env.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// setNodeStatus writes a node's Ready condition and volumesInUse.
// setNodeStatus sets the Ready condition and lists the volumes both in use and
// attached, as a node that mounted them does.
func setNodeStatus(t *testing.T, name string, ready bool, inUse ...string) {
	t.Helper()
	setNodeVolumes(t, name, ready, inUse, inUse)
}

func setNodeVolumes(t *testing.T, name string, ready bool, inUse, attached []string) {
	t.Helper()
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionFalse
	}
	entries := make([]string, len(attached))
	for i, v := range attached {
		entries[i] = fmt.Sprintf(`{"name":%q,"devicePath":""}`, v)
	}
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":%q}],"volumesInUse":[%s],"volumesAttached":[%s]}}`,
		status, quoteAll(inUse), strings.Join(entries, ","))
	if _, err := env.Client.CoreV1().Nodes().Patch(t.Context(), name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("patching node status: %v", err)
	}
}

func quoteAll(ss []string) string {
	quoted := make([]string, len(ss))
	for i, s := range ss {
		quoted[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(quoted, ",")
}

func taintOutOfService(t *testing.T, name string) {
	t.Helper()
	patch := `{"spec":{"taints":[{"key":"node.kubernetes.io/out-of-service","value":"nodeshutdown","effect":"NoExecute"}]}}`
	if _, err := env.Client.CoreV1().Nodes().Patch(t.Context(), name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("tainting node: %v", err)
	}
}

func createAttachment(t *testing.T, name, pv, node string, finalizers ...string) {
	t.Helper()
	createAttachmentFrom(t, name, storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}, node, finalizers...)
}

func createAttachmentFrom(t *testing.T, name string, source storagev1.VolumeAttachmentSource, node string, finalizers ...string) {
	t.Helper()
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: finalizers},
		Spec:       storagev1.VolumeAttachmentSpec{Attacher: driver, NodeName: node, Source: source},
	}
	if _, err := env.Client.StorageV1().VolumeAttachments().Create(t.Context(), va, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating volume attachment: %v", err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = env.Client.StorageV1().VolumeAttachments().Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		_ = env.Client.StorageV1().VolumeAttachments().Delete(ctx, name, metav1.DeleteOptions{})
	})
}

func deleteAttachment(t *testing.T, name string) {
	t.Helper()
	if err := env.Client.StorageV1().VolumeAttachments().Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting volume attachment: %v", err)
	}
}

func wantViolations(t *testing.T, c *Checker, want int, mustContain string) {
	t.Helper()
	got := c.Violations()
	if len(got) != want {
		t.Fatalf("got %d violations, want %d:\n%s", len(got), want, strings.Join(got, "\n"))
	}
	for _, v := range got {
		if !strings.Contains(v, mustContain) {
			t.Errorf("violation %q does not mention %q", v, mustContain)
		}
	}
}

func TestMultiAttach(t *testing.T) {
	for _, tc := range []struct {
		name       string
		modes      []corev1.PersistentVolumeAccessMode
		violations int
	}{
		{name: "rwo", modes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, violations: 1},
		{name: "rwop", modes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}, violations: 1},
		{name: "rwx", modes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadWriteMany}, violations: 0},
		{name: "rox", modes: []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany}, violations: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startChecker(t)
			pv := "multi-" + tc.name
			createPV(t, pv, tc.modes...)
			// Attachments on one node, then a second node while the first is being deleted.
			createAttachment(t, pv+"-a", pv, "node-a", "test/keep")
			createAttachment(t, pv+"-a2", pv, "node-a")
			deleteAttachment(t, pv+"-a")
			createAttachment(t, pv+"-b", pv, "node-b")
			wantViolations(t, c, tc.violations, "PV "+pv)
		})
	}
}

// A migrated in-tree PV is single-attach by its translated access modes: a
// gcePersistentDisk marked ReadWriteMany, or ReadWriteOnce with ReadOnlyMany, is
// ReadWriteOnce once translated, and kube-controller-manager keeps it on one node.
func TestMultiAttachMigratedPVIsJudgedOnItsTranslation(t *testing.T) {
	for _, tc := range []struct {
		name       string
		modes      []corev1.PersistentVolumeAccessMode
		readOnly   bool
		violations int
	}{
		{name: "rwx", modes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, violations: 1},
		{name: "rwo-rox", modes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadOnlyMany}, violations: 1},
		{name: "ro-rox", modes: []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany}, readOnly: true, violations: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startChecker(t)
			pv := "gce-" + tc.name
			createPVFrom(t, pv, corev1.PersistentVolumeSource{GCEPersistentDisk: &corev1.GCEPersistentDiskVolumeSource{PDName: pv, ReadOnly: tc.readOnly}}, tc.modes...)
			createAttachment(t, pv+"-a", pv, "node-a")
			createAttachment(t, pv+"-b", pv, "node-b")
			wantViolations(t, c, tc.violations, "PV "+pv)
		})
	}
}

func TestMultiAttachInline(t *testing.T) {
	for _, tc := range []struct {
		name       string
		modes      []corev1.PersistentVolumeAccessMode
		violations int
	}{
		{name: "rwo", modes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, violations: 1},
		{name: "rwx", modes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, violations: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startChecker(t)
			handle := "inline-" + tc.name
			source := storagev1.VolumeAttachmentSource{InlineVolumeSpec: &corev1.PersistentVolumeSpec{
				AccessModes:            tc.modes,
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle}},
			}}
			createAttachmentFrom(t, handle+"-a", source, "node-a")
			createAttachmentFrom(t, handle+"-b", source, "node-b")
			wantViolations(t, c, tc.violations, sim.UniqueVolumeName(driver, handle))
		})
	}
}

func TestMultiAttachAfterDetach(t *testing.T) {
	c := startChecker(t)
	createPV(t, "moved", corev1.ReadWriteOnce)
	createAttachment(t, "moved-a", "moved", "node-a")
	deleteAttachment(t, "moved-a")
	createAttachment(t, "moved-b", "moved", "node-b")
	wantViolations(t, c, 0, "")
}

func TestDetachWhileMounted(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ready     bool
		mounted   bool
		taint     bool
		finalizer bool
		// unlisted: the node reports the volume in use only after it left volumesAttached.
		unlisted   bool
		violations int
	}{
		{name: "in-use-after-unlisted", ready: true, mounted: true, unlisted: true, violations: 0},
		{name: "mounted-ready", ready: true, mounted: true, violations: 1},
		{name: "mounted-ready-finalizer", ready: true, mounted: true, finalizer: true, violations: 1},
		{name: "unmounted", ready: true, violations: 0},
		{name: "mounted-not-ready", mounted: true, violations: 0},
		{name: "mounted-out-of-service", ready: true, mounted: true, taint: true, violations: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node, pv := "detach-"+tc.name+"-node", "detach-"+tc.name
			createNode(t, node)
			createPV(t, pv, corev1.ReadWriteOnce)
			var inUse []string
			if tc.mounted {
				inUse = append(inUse, sim.UniqueVolumeName(driver, pv))
			}
			if tc.unlisted {
				setNodeVolumes(t, node, tc.ready, inUse, inUse)
				setNodeVolumes(t, node, tc.ready, nil, nil)
				setNodeVolumes(t, node, tc.ready, inUse, nil)
			} else {
				setNodeStatus(t, node, tc.ready, inUse...)
			}
			if tc.taint {
				taintOutOfService(t, node)
			}
			var finalizers []string
			if tc.finalizer {
				finalizers = append(finalizers, "test/keep")
			}
			createAttachment(t, pv, pv, node, finalizers...)
			c := startChecker(t)
			deleteAttachment(t, pv)
			// What happens after the deletion request does not matter.
			setNodeStatus(t, node, tc.ready)
			wantViolations(t, c, tc.violations, "VolumeAttachment "+pv)
		})
	}
}

// TestUnmountThenDetach checks the ordering: an unmount recorded just before the
// deletion is not a violation, however the watch events interleave.
func TestUnmountThenDetach(t *testing.T) {
	const node, pv = "ordered-node", "ordered"
	createNode(t, node)
	createPV(t, pv, corev1.ReadWriteOnce)
	setNodeStatus(t, node, true, sim.UniqueVolumeName(driver, pv))
	createAttachment(t, pv, pv, node)
	c := startChecker(t)
	setNodeStatus(t, node, true)
	deleteAttachment(t, pv)
	wantViolations(t, c, 0, "")
}
