package deploy

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
)

// pollEvery is how often the tests look at the API server while they wait.
const pollEvery = 20 * time.Millisecond

// world is what a test's controller acts on: a namespace for pods and claims, a CSI
// driver, and nodes run by the kubelet simulator, with the external-attacher
// simulator attaching and detaching. Names are unique per world, so tests sharing
// the control plane do not see each other's objects.
type world struct {
	t      *testing.T
	ns     string
	driver string
	nodes  []string
}

type worldOptions struct {
	nodes        int
	unmountDelay time.Duration
	attachDelay  time.Duration
	detachDelay  time.Duration
}

// newWorld creates the namespace and the nodes and starts the simulators; they stop
// when the test ends.
func newWorld(t *testing.T, o worldOptions) *world {
	t.Helper()
	id := rand.String(5)
	w := &world{t: t, ns: "w-" + id, driver: "csi-" + id + ".example.com"}
	for i := range o.nodes {
		w.nodes = append(w.nodes, fmt.Sprintf("node-%s-%c", id, 'a'+i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", w.ns, err)
	}
	if _, err := sim.StartKubelet(ctx, env.AdminConfig(), sim.KubeletOptions{
		Nodes: w.nodes, CreateNodes: true, ManagePods: true, UnmountDelay: o.unmountDelay,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.StartAttacher(ctx, env.AdminConfig(), sim.AttacherOptions{
		Drivers: []string{w.driver}, AttachDelay: o.attachDelay, DetachDelay: o.detachDelay,
	}); err != nil {
		t.Fatal(err)
	}
	return w
}

// volume is a ReadWriteOnce PersistentVolume of the world's driver and the claim
// bound to it.
type volume struct {
	pv, claim string
	// unique is the name node status lists the volume by.
	unique string
}

func (w *world) createVolume(name string) volume {
	w.t.Helper()
	ctx := w.t.Context()
	v := volume{pv: w.ns + "-" + name, claim: name}
	v.unique = sim.UniqueVolumeName(w.driver, v.pv)
	modes := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	size := corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	claim, err := env.Client.CoreV1().PersistentVolumeClaims(w.ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name},
		Spec:       corev1.PersistentVolumeClaimSpec{AccessModes: modes, VolumeName: v.pv, Resources: corev1.VolumeResourceRequirements{Requests: size}},
	}, metav1.CreateOptions{})
	if err != nil {
		w.t.Fatalf("creating claim %s: %v", name, err)
	}
	claim.Status.Phase = corev1.ClaimBound
	if _, err := env.Client.CoreV1().PersistentVolumeClaims(w.ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		w.t.Fatalf("binding claim %s: %v", name, err)
	}
	if _, err := env.Client.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: v.pv},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes: modes,
			Capacity:    size,
			ClaimRef:    &corev1.ObjectReference{Namespace: w.ns, Name: name, UID: claim.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: w.driver, VolumeHandle: v.pv},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		w.t.Fatalf("creating volume %s: %v", v.pv, err)
	}
	return v
}

// createPod creates a pod scheduled to node that mounts the volume's claim.
func (w *world) createPod(name, node string, v volume) {
	w.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.claim},
			}}},
		},
	}
	if _, err := env.Client.CoreV1().Pods(w.ns).Create(w.t.Context(), pod, metav1.CreateOptions{}); err != nil {
		w.t.Fatalf("creating pod %s: %v", name, err)
	}
}

// deletePod deletes a pod gracefully: the kubelet simulator stops it, unmounts its
// volume and then removes the object.
func (w *world) deletePod(name string) {
	w.t.Helper()
	if err := env.Client.CoreV1().Pods(w.ns).Delete(w.t.Context(), name, metav1.DeleteOptions{}); err != nil {
		w.t.Fatalf("deleting pod %s: %v", name, err)
	}
}

// attachments returns the VolumeAttachments of the volume, by node.
func (w *world) attachments(v volume) map[string]storagev1.VolumeAttachment {
	w.t.Helper()
	list, err := env.Client.StorageV1().VolumeAttachments().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		w.t.Fatalf("listing VolumeAttachments: %v", err)
	}
	byNode := map[string]storagev1.VolumeAttachment{}
	for _, va := range list.Items {
		if pv := va.Spec.Source.PersistentVolumeName; va.Spec.Attacher == w.driver && pv != nil && *pv == v.pv {
			byNode[va.Spec.NodeName] = va
		}
	}
	return byNode
}

// inNodeStatus tells whether the node's status.volumesAttached lists the volume.
func (w *world) inNodeStatus(v volume, node string) bool {
	w.t.Helper()
	n, err := env.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		w.t.Fatalf("reading node %s: %v", node, err)
	}
	return slices.ContainsFunc(n.Status.VolumesAttached, func(av corev1.AttachedVolume) bool { return string(av.Name) == v.unique })
}

// attachedOnlyTo tells whether the volume is attached to node and nowhere else, as
// VolumeAttachments and the node's status say.
func (w *world) attachedOnlyTo(v volume, node string) bool {
	vas := w.attachments(v)
	va, ok := vas[node]
	return len(vas) == 1 && ok && va.Status.Attached && va.DeletionTimestamp == nil && w.inNodeStatus(v, node)
}

// waitAttachedOnlyTo waits until the volume is attached to node and nowhere else.
func (w *world) waitAttachedOnlyTo(v volume, node string, timeout time.Duration) {
	w.t.Helper()
	eventually(w.t, timeout, fmt.Sprintf("%s attached to %s only", v.pv, node), func() bool { return w.attachedOnlyTo(v, node) })
}

// waitDetached waits until the volume has no VolumeAttachment left.
func (w *world) waitDetached(v volume, timeout time.Duration) {
	w.t.Helper()
	eventually(w.t, timeout, fmt.Sprintf("%s detached everywhere", v.pv), func() bool { return len(w.attachments(v)) == 0 })
}

// podEvents returns "<type> <reason> <message>" of the events about a pod.
func (w *world) podEvents(pod string) []string {
	w.t.Helper()
	list, err := env.Client.CoreV1().Events(w.ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", pod).String(),
	})
	if err != nil {
		w.t.Fatalf("listing events of pod %s: %v", pod, err)
	}
	var events []string
	for _, e := range list.Items {
		events = append(events, e.Type+" "+e.Reason+" "+e.Message)
	}
	return events
}

// waitEvent waits for an event about the pod.
func (w *world) waitEvent(pod, want string) {
	w.t.Helper()
	eventually(w.t, 20*time.Second, fmt.Sprintf("event %q on pod %s", want, pod), func() bool {
		return slices.Contains(w.podEvents(pod), want)
	})
}

// eventually waits for cond, failing the test after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(pollEvery)
	}
}
