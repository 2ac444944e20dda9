package localcluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
)

// PodImage is the image of the pods the cluster helpers create; nothing pulls it.
const PodImage = "registry.k8s.io/pause:3.10"

// Volume is a PersistentVolume of the cluster's driver with the claim bound to it.
type Volume struct {
	// PV is the PersistentVolume's name, Namespace/Claim the claim's.
	PV, Namespace, Claim string
	// Handle is the CSI volume handle, the volume ID the driver sees.
	Handle string
	// Unique is the unique volume name kubelet and the controller use in node status.
	Unique string
}

// AttachmentName is the name of the VolumeAttachment of a volume on a node, computed
// here from the contract (csi-<sha256(handle+driver+node)>), not by the controller's code.
func (c *Cluster) AttachmentName(v Volume, node string) string {
	sum := sha256.Sum256([]byte(v.Handle + c.DriverName + node))
	return "csi-" + hex.EncodeToString(sum[:])
}

// CreateNamespace creates a namespace; one that exists already is fine.
func (c *Cluster) CreateNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// CreateVolume creates a PersistentVolume of the cluster's driver named
// <namespace>-<claim>, with that name as its volume handle, and the claim bound to it,
// both with status Bound, as the PV controller would leave them.
func (c *Cluster) CreateVolume(ctx context.Context, namespace, claim string, mode corev1.PersistentVolumeAccessMode) (Volume, error) {
	name := namespace + "-" + claim
	v := Volume{PV: name, Namespace: namespace, Claim: claim, Handle: name, Unique: sim.UniqueVolumeName(c.DriverName, name)}
	modes := []corev1.PersistentVolumeAccessMode{mode}
	size := corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}

	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: claim},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: modes,
			VolumeName:  name,
			Resources:   corev1.VolumeResourceRequirements{Requests: size},
		},
	}
	created, err := c.Client.CoreV1().PersistentVolumeClaims(namespace).Create(ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		return v, fmt.Errorf("creating claim %s/%s: %w", namespace, claim, err)
	}
	created.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: modes, Capacity: size}
	if _, err := c.Client.CoreV1().PersistentVolumeClaims(namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return v, fmt.Errorf("binding claim %s/%s: %w", namespace, claim, err)
	}

	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes: modes,
			Capacity:    size,
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: namespace, Name: claim, UID: created.UID,
			},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: c.DriverName, VolumeHandle: name},
			},
		},
	}
	createdPV, err := c.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if err != nil {
		return v, fmt.Errorf("creating PersistentVolume %s: %w", name, err)
	}
	createdPV.Status.Phase = corev1.VolumeBound
	if _, err := c.Client.CoreV1().PersistentVolumes().UpdateStatus(ctx, createdPV, metav1.UpdateOptions{}); err != nil {
		return v, fmt.Errorf("binding PersistentVolume %s: %w", name, err)
	}
	return v, nil
}

// CreatePod creates a pod already scheduled to node that mounts the claims.
func (c *Cluster) CreatePod(ctx context.Context, namespace, name, node string, claims ...string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
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
	if _, err := c.Client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating pod %s/%s: %w", namespace, name, err)
	}
	return nil
}

// DeletePod deletes a pod gracefully: the kubelet stand-in stops it, unmounts its
// volumes and then removes the object.
func (c *Cluster) DeletePod(ctx context.Context, namespace, name string) error {
	if err := c.Client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting pod %s/%s: %w", namespace, name, err)
	}
	return nil
}

// Attachment returns the VolumeAttachment of a volume on a node, nil if there is none.
func (c *Cluster) Attachment(ctx context.Context, v Volume, node string) (*storagev1.VolumeAttachment, error) {
	va, err := c.Client.StorageV1().VolumeAttachments().Get(ctx, c.AttachmentName(v, node), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the VolumeAttachment of %s on %s: %w", v.PV, node, err)
	}
	return va, nil
}

// Attachments returns the VolumeAttachments of the cluster's driver.
func (c *Cluster) Attachments(ctx context.Context) ([]storagev1.VolumeAttachment, error) {
	list, err := c.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing VolumeAttachments: %w", err)
	}
	return slices.DeleteFunc(list.Items, func(va storagev1.VolumeAttachment) bool { return va.Spec.Attacher != c.DriverName }), nil
}

// InNodeStatus tells whether a node's status lists the volume in volumesAttached
// (attached) or in volumesInUse (inUse), as the API server has it now.
func (c *Cluster) InNodeStatus(ctx context.Context, node string, v Volume) (attached, inUse bool, err error) {
	n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return false, false, fmt.Errorf("reading node %s: %w", node, err)
	}
	for _, av := range n.Status.VolumesAttached {
		attached = attached || string(av.Name) == v.Unique
	}
	return attached, slices.Contains(n.Status.VolumesInUse, corev1.UniqueVolumeName(v.Unique)), nil
}
