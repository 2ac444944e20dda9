// Package workload makes what the attach/detach controller acts on, as a user and the
// PersistentVolume controller would: claims bound to CSI PersistentVolumes of one
// driver, and pods that use them, in one namespace. It reads back what the controller
// made of them: VolumeAttachments, node status and pod events, under the names the
// contract gives them (internal/sim), never the controller's own code.
//
// The suites (through internal/suite), the local cluster's demo and the benchmark all
// make their volumes and pods with it.
package workload

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
)

// PodImage is the image of the pods a Workload makes; nothing pulls it.
const PodImage = "registry.k8s.io/pause:3.10"

// volumeSize is the capacity of every claim and PersistentVolume.
var volumeSize = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}

// Workload makes and reads the objects of one namespace and one CSI driver.
type Workload struct {
	Client    kubernetes.Interface
	Namespace string
	// Driver is the CSI driver of the volumes.
	Driver string
}

// Volume is a CSI PersistentVolume and the claim bound to it.
type Volume struct {
	// PV is the PersistentVolume's name, Namespace/Claim the claim's.
	PV, Namespace, Claim string
	// Driver is the CSI driver, Handle the volume handle, the volume ID it sees.
	Driver, Handle string
	Modes          []corev1.PersistentVolumeAccessMode
	// InTree, when set, is the PersistentVolume's in-tree iSCSI or Fibre Channel
	// source, used instead of the CSI driver: no VolumeAttachment records it.
	InTree *corev1.PersistentVolumeSource
}

// UniqueName is the name of the volume in node status.
func (v Volume) UniqueName() string {
	switch {
	case v.InTree == nil:
		return sim.UniqueVolumeName(v.Driver, v.Handle)
	case v.InTree.ISCSI != nil:
		return sim.ISCSIVolumeName(v.InTree.ISCSI.TargetPortal, v.InTree.ISCSI.IQN, v.InTree.ISCSI.Lun)
	}
	return sim.FCVolumeName(v.InTree.FC)
}

// AttachmentName is the name of the volume's VolumeAttachment on node.
func (v Volume) AttachmentName(node string) string {
	return sim.AttachmentName(v.Driver, v.Handle, node)
}

// VolumeOptions varies a volume.
type VolumeOptions struct {
	// Modes are the access modes; ReadWriteOnce if empty.
	Modes []corev1.PersistentVolumeAccessMode
	// Handle is the volume handle; the PersistentVolume's name if empty.
	Handle string
	// ClaimUID, if set, is the UID in the PersistentVolume's claimRef instead of the
	// claim's: the volume is then bound to another incarnation of the claim.
	ClaimUID types.UID
	// NoPV creates only the claim, bound to a PersistentVolume that CreatePV makes
	// later.
	NoPV bool
	// InTree is an in-tree iSCSI or Fibre Channel source for the PersistentVolume
	// instead of a CSI one.
	InTree *corev1.PersistentVolumeSource
	// Claim and PV, if set, change the claim and the PersistentVolume before they
	// are created (what a provisioner and the PersistentVolume controller add).
	Claim func(*corev1.PersistentVolumeClaim)
	PV    func(*corev1.PersistentVolume)
}

// NewVolume names the volume of a claim, <namespace>-<claim>, without making anything.
func (w *Workload) NewVolume(claim string, o VolumeOptions) Volume {
	v := Volume{PV: w.Namespace + "-" + claim, Namespace: w.Namespace, Claim: claim, Driver: w.Driver, Handle: o.Handle, Modes: o.Modes, InTree: o.InTree}
	if v.Handle == "" {
		v.Handle = v.PV
	}
	if len(v.Modes) == 0 {
		v.Modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	return v
}

// CreateNamespace creates the namespace; one that exists already is fine.
func (w *Workload) CreateNamespace(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.Namespace}}
	if _, err := w.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", w.Namespace, err)
	}
	return nil
}

// CreateVolume creates a claim and the PersistentVolume bound to it (see NewVolume),
// both with status Bound, as the PersistentVolume controller leaves them, the
// claim's status written last.
func (w *Workload) CreateVolume(ctx context.Context, claim string, o VolumeOptions) (Volume, error) {
	v := w.NewVolume(claim, o)
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: claim},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: v.Modes,
			VolumeName:  v.PV,
			Resources:   corev1.VolumeResourceRequirements{Requests: volumeSize},
		},
	}
	if o.Claim != nil {
		o.Claim(pvc)
	}
	claims := w.Client.CoreV1().PersistentVolumeClaims(w.Namespace)
	created, err := claims.Create(ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		return v, fmt.Errorf("creating claim %s/%s: %w", w.Namespace, claim, err)
	}
	if !o.NoPV {
		uid := created.UID
		if o.ClaimUID != "" {
			uid = o.ClaimUID
		}
		if err := w.createPV(ctx, v, uid, o.PV); err != nil {
			return v, err
		}
	}
	// The claim is bound last, as the PersistentVolume controller binds it: a
	// controller that sees it Bound may already find its PersistentVolume.
	created.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: v.Modes, Capacity: volumeSize}
	if _, err := claims.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return v, fmt.Errorf("binding claim %s/%s: %w", w.Namespace, claim, err)
	}
	return v, nil
}

// CreatePV creates the volume's PersistentVolume, bound to the claim with claimUID.
func (w *Workload) CreatePV(ctx context.Context, v Volume, claimUID types.UID) error {
	return w.createPV(ctx, v, claimUID, nil)
}

func (w *Workload) createPV(ctx context.Context, v Volume, claimUID types.UID, change func(*corev1.PersistentVolume)) error {
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: v.PV},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes: v.Modes,
			Capacity:    volumeSize,
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: v.Namespace, Name: v.Claim, UID: claimUID,
			},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: v.Driver, VolumeHandle: v.Handle},
			},
		},
	}
	if v.InTree != nil {
		pv.Spec.PersistentVolumeSource = *v.InTree
	}
	if change != nil {
		change(pv)
	}
	created, err := w.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating PersistentVolume %s: %w", v.PV, err)
	}
	created.Status.Phase = corev1.VolumeBound
	if _, err := w.Client.CoreV1().PersistentVolumes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("binding PersistentVolume %s: %w", v.PV, err)
	}
	return nil
}

// Pod returns a pod already scheduled to node that mounts the claims, to change
// before CreatePod.
func (w *Workload) Pod(name, node string, claims ...string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: name},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "app", Image: PodImage}},
		},
	}
	for _, claim := range claims {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{
			Name:         claim,
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}},
		})
		pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: claim, MountPath: "/mnt/" + claim})
	}
	return pod
}

// CreatePod creates the pod.
func (w *Workload) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	if _, err := w.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// DeletePod deletes a pod gracefully: kubelet (or its stand-in) stops it, unmounts its
// volumes and then removes the object.
func (w *Workload) DeletePod(ctx context.Context, name string) error {
	return w.deletePod(ctx, name, nil)
}

// DeletePodNow deletes a pod with no grace period: the object is gone at once, as if
// its node had been lost, whatever its volumes' state.
func (w *Workload) DeletePodNow(ctx context.Context, name string) error {
	return w.deletePod(ctx, name, new(int64))
}

func (w *Workload) deletePod(ctx context.Context, name string, grace *int64) error {
	if err := w.Client.CoreV1().Pods(w.Namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: grace}); err != nil {
		return fmt.Errorf("deleting pod %s/%s: %w", w.Namespace, name, err)
	}
	return nil
}

// Attachment returns the VolumeAttachment of a volume on a node, nil if there is none.
func (w *Workload) Attachment(ctx context.Context, v Volume, node string) (*storagev1.VolumeAttachment, error) {
	va, err := w.Client.StorageV1().VolumeAttachments().Get(ctx, v.AttachmentName(node), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the VolumeAttachment of %s on %s: %w", v.PV, node, err)
	}
	return va, nil
}

// Attachments returns the VolumeAttachments of the driver.
func (w *Workload) Attachments(ctx context.Context) ([]storagev1.VolumeAttachment, error) {
	list, err := w.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing VolumeAttachments: %w", err)
	}
	return slices.DeleteFunc(list.Items, func(va storagev1.VolumeAttachment) bool { return va.Spec.Attacher != w.Driver }), nil
}

// InNodeStatus tells whether a node's status lists the volume in volumesAttached
// (attached) and in volumesInUse (inUse), as the API server has it now.
func (w *Workload) InNodeStatus(ctx context.Context, node string, v Volume) (attached, inUse bool, err error) {
	n, err := w.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return false, false, fmt.Errorf("reading node %s: %w", node, err)
	}
	unique := corev1.UniqueVolumeName(v.UniqueName())
	attached = slices.ContainsFunc(n.Status.VolumesAttached, func(av corev1.AttachedVolume) bool { return av.Name == unique })
	return attached, slices.Contains(n.Status.VolumesInUse, unique), nil
}

// PodEvents returns the events about a pod as "<type> <reason> <message>", an event
// that repeated (its count) as many times as it happened.
func (w *Workload) PodEvents(ctx context.Context, pod string) ([]string, error) {
	list, err := w.Client.CoreV1().Events(w.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", pod).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("listing the events of pod %s/%s: %w", w.Namespace, pod, err)
	}
	var events []string
	for _, e := range list.Items {
		for range max(e.Count, 1) {
			events = append(events, e.Type+" "+e.Reason+" "+e.Message)
		}
	}
	return events, nil
}
