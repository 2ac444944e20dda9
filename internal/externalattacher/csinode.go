package externalattacher

import (
	"context"
	"fmt"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// EnsureCSINode makes the CSINode of nodeName list driver with nodeID, as kubelet does
// when the driver registers on the node: it creates the CSINode, or adds or updates the
// driver's entry in an existing one. csi-attacher maps a VolumeAttachment's
// spec.nodeName to the node ID it passes to ControllerPublishVolume through it.
func EnsureCSINode(ctx context.Context, client kubernetes.Interface, nodeName, driver, nodeID string) (*storagev1.CSINode, error) {
	entry := storagev1.CSINodeDriver{Name: driver, NodeID: nodeID}
	csiNodes := client.StorageV1().CSINodes()
	var out *storagev1.CSINode
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		existing, err := csiNodes.Get(ctx, nodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			csiNode := &storagev1.CSINode{
				ObjectMeta: metav1.ObjectMeta{Name: nodeName},
				Spec:       storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{entry}},
			}
			out, err = csiNodes.Create(ctx, csiNode, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(storagev1.Resource("csinodes"), nodeName, err)
			}
			return err
		}
		if err != nil {
			return err
		}
		if !setDriver(&existing.Spec, entry) {
			out = existing
			return nil
		}
		out, err = csiNodes.Update(ctx, existing, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("ensure CSINode %s lists driver %s with node ID %s: %w", nodeName, driver, nodeID, err)
	}
	return out, nil
}

// setDriver puts entry into spec, replacing the entry of the same driver; it reports
// whether spec changed.
func setDriver(spec *storagev1.CSINodeSpec, entry storagev1.CSINodeDriver) bool {
	for i, d := range spec.Drivers {
		if d.Name != entry.Name {
			continue
		}
		if d.NodeID == entry.NodeID {
			return false
		}
		spec.Drivers[i].NodeID = entry.NodeID
		return true
	}
	spec.Drivers = append(spec.Drivers, entry)
	return true
}
