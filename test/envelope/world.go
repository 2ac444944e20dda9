package main

import (
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/attachdetach-controller/attachdetach-controller/internal/fakeapi"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

const (
	// driver is the CSI driver of every volume; its CSIDriver requires attach.
	driver = "envelope.csi.example.com"
	// namespace holds the claims and pods.
	namespace = "envelope"
	// setupActor is who writes the world into the store.
	setupActor = "envelope"
)

// world is the store and the minimal objects in it: pods volumes running and
// attached (each pod uses one claim, bound to a CSI PersistentVolume), on nodes
// that list them in status.volumesAttached and volumesInUse, and spare volumes
// (claim and PersistentVolume, no pod) for the probe and the attach phase.
type world struct {
	store *fakeapi.Store
	names workload.Workload
	nodes []string
	// attached are the volumes whose pods run from the start; spare the others,
	// the first of them the start-up probe's.
	attached, spare []workload.Volume

	mu sync.Mutex
	// firstCreated is when each VolumeAttachment in watched was first created.
	watched      map[string]bool
	firstCreated map[string]time.Time
}

// newWorld writes a world of pods attached volumes and spare more into a new
// store, the pods spread round-robin over nodes nodes.
func newWorld(pods, nodes, spare int) (*world, error) {
	w := &world{
		names:        workload.Workload{Namespace: namespace, Driver: driver},
		watched:      map[string]bool{},
		firstCreated: map[string]time.Time{},
	}
	w.store = fakeapi.NewStore(w.observe)
	for i := range nodes {
		w.nodes = append(w.nodes, fmt.Sprintf("node-%d", i))
	}
	if err := w.create(&storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: driver},
		Spec:       storagev1.CSIDriverSpec{AttachRequired: ptr.To(true)},
	}); err != nil {
		return nil, err
	}
	onNode := make([][]corev1.UniqueVolumeName, nodes)
	for i := range pods + spare {
		v, err := w.createVolume(fmt.Sprintf("claim-%d", i))
		if err != nil {
			return nil, err
		}
		if i >= pods {
			w.spare = append(w.spare, v)
			continue
		}
		w.attached = append(w.attached, v)
		node := w.nodeOf(i)
		pod := w.pod(i)
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning}
		if err := w.create(pod); err != nil {
			return nil, err
		}
		if err := w.create(attachedVA(v, node)); err != nil {
			return nil, err
		}
		onNode[i%nodes] = append(onNode[i%nodes], corev1.UniqueVolumeName(v.UniqueName()))
	}
	for i, name := range w.nodes {
		node := sim.NewNode(name)
		slices.Sort(onNode[i])
		node.Status.VolumesInUse = onNode[i]
		for _, v := range onNode[i] {
			node.Status.VolumesAttached = append(node.Status.VolumesAttached, corev1.AttachedVolume{Name: v})
		}
		if err := w.create(node); err != nil {
			return nil, err
		}
	}
	return w, nil
}

func (w *world) create(obj runtime.Object) error {
	if _, err := w.store.Create(setupActor, obj); err != nil {
		return fmt.Errorf("creating %s: %w", fakeapi.ResourceOf(obj), err)
	}
	return nil
}

// createVolume creates a claim and its PersistentVolume, both bound, as the
// PersistentVolume controller leaves them.
func (w *world) createVolume(claim string) (workload.Volume, error) {
	v := w.names.NewVolume(claim, workload.VolumeOptions{})
	created, err := w.store.Create(setupActor, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: v.Namespace, Name: v.Claim},
		Spec:       corev1.PersistentVolumeClaimSpec{AccessModes: v.Modes, VolumeName: v.PV},
		Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: v.Modes},
	})
	if err != nil {
		return v, fmt.Errorf("creating claim %s: %w", v.Claim, err)
	}
	err = w.create(&corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: v.PV},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes: v.Modes,
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", Namespace: v.Namespace, Name: v.Claim, UID: created.(*corev1.PersistentVolumeClaim).UID,
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: v.Driver, VolumeHandle: v.Handle},
			},
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeBound},
	})
	return v, err
}

// attachedVA is the VolumeAttachment of v on node as the controller creates it
// and the external-attacher leaves it once attached.
func attachedVA(v workload.Volume, node string) *storagev1.VolumeAttachment {
	return &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: v.AttachmentName(node), Finalizers: []string{sim.AttacherFinalizer(driver)}},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: driver,
			NodeName: node,
			Source:   storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(v.PV)},
		},
		Status: storagev1.VolumeAttachmentStatus{Attached: true},
	}
}

// nodeOf is the node of the i-th volume's pod.
func (w *world) nodeOf(i int) string { return w.nodes[i%len(w.nodes)] }

// pod returns the pod of the i-th volume (counting the attached volumes, then
// the spare ones), on its node.
func (w *world) pod(i int) *corev1.Pod {
	v := w.volume(i)
	return w.names.Pod(fmt.Sprintf("pod-%d", i), w.nodeOf(i), v.Claim)
}

func (w *world) volume(i int) workload.Volume {
	if i < len(w.attached) {
		return w.attached[i]
	}
	return w.spare[i-len(w.attached)]
}

// watch records when the VolumeAttachment of the i-th volume is first created.
func (w *world) watch(i int) string {
	name := w.volume(i).AttachmentName(w.nodeOf(i))
	w.mu.Lock()
	defer w.mu.Unlock()
	w.watched[name] = true
	return name
}

// created returns when the VolumeAttachment was first created, if it was.
func (w *world) created(name string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.firstCreated[name]
	return t, ok
}

// observe is the store's observer: it runs with the store locked, on every write.
func (w *world) observe(_ fakeapi.Reader, write fakeapi.Write) {
	if write.Verb != "create" || write.Ref.Resource != fakeapi.VolumeAttachments {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, seen := w.firstCreated[write.Ref.Name]; w.watched[write.Ref.Name] && !seen {
		w.firstCreated[write.Ref.Name] = time.Now()
	}
}

// progress counts, of the volumes from..to-1, those whose pods run on their
// nodes that are attached (in node status) and those that are detached (no
// VolumeAttachment, not in node status).
func (w *world) progress(from, to int) (attached, detached int) {
	w.store.Read(func(r fakeapi.Reader) {
		for i := from; i < to; i++ {
			v, node := w.volume(i), w.nodeOf(i)
			n, _ := fakeapi.Get[*corev1.Node](r, "", node)
			listed := n != nil && slices.ContainsFunc(n.Status.VolumesAttached, func(a corev1.AttachedVolume) bool {
				return string(a.Name) == v.UniqueName()
			})
			_, hasVA := fakeapi.Get[*storagev1.VolumeAttachment](r, "", v.AttachmentName(node))
			switch {
			case listed:
				attached++
			case !hasVA:
				detached++
			}
		}
	})
	return attached, detached
}
