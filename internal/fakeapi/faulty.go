package fakeapi

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	typedstoragev1 "k8s.io/client-go/kubernetes/typed/storage/v1"
)

// clientset puts a Client's faults on the writes of nodes and VolumeAttachments,
// outside the fake clientset's lock, so that a delayed request holds back only its
// caller.
type clientset struct {
	kubernetes.Interface
	c *Client
}

// IsWatchListSemanticsUnSupported tells informers to list then watch: the store
// does not send the bookmark that ends a streamed list.
func (cs clientset) IsWatchListSemanticsUnSupported() bool { return true }

func (cs clientset) CoreV1() typedcorev1.CoreV1Interface {
	return coreV1{CoreV1Interface: cs.Interface.CoreV1(), c: cs.c}
}

func (cs clientset) StorageV1() typedstoragev1.StorageV1Interface {
	return storageV1{StorageV1Interface: cs.Interface.StorageV1(), c: cs.c}
}

type coreV1 struct {
	typedcorev1.CoreV1Interface
	c *Client
}

func (x coreV1) Nodes() typedcorev1.NodeInterface {
	return nodes{NodeInterface: x.CoreV1Interface.Nodes(), c: x.c}
}

type storageV1 struct {
	typedstoragev1.StorageV1Interface
	c *Client
}

func (x storageV1) VolumeAttachments() typedstoragev1.VolumeAttachmentInterface {
	return attachments{VolumeAttachmentInterface: x.StorageV1Interface.VolumeAttachments(), c: x.c}
}

type nodes struct {
	typedcorev1.NodeInterface
	c *Client
}

func (n nodes) Create(ctx context.Context, node *corev1.Node, opts metav1.CreateOptions) (*corev1.Node, error) {
	return call(ctx, n.c, "create", Nodes, node.Name, func() (*corev1.Node, error) { return n.NodeInterface.Create(ctx, node, opts) })
}

func (n nodes) Update(ctx context.Context, node *corev1.Node, opts metav1.UpdateOptions) (*corev1.Node, error) {
	return call(ctx, n.c, "update", Nodes, node.Name, func() (*corev1.Node, error) { return n.NodeInterface.Update(ctx, node, opts) })
}

func (n nodes) UpdateStatus(ctx context.Context, node *corev1.Node, opts metav1.UpdateOptions) (*corev1.Node, error) {
	return call(ctx, n.c, "update", Nodes, node.Name, func() (*corev1.Node, error) { return n.NodeInterface.UpdateStatus(ctx, node, opts) })
}

func (n nodes) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Node, error) {
	return call(ctx, n.c, "patch", Nodes, name, func() (*corev1.Node, error) {
		return n.NodeInterface.Patch(ctx, name, pt, data, opts, subresources...)
	})
}

func (n nodes) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	_, err := call(ctx, n.c, "delete", Nodes, name, func() (struct{}, error) { return struct{}{}, n.NodeInterface.Delete(ctx, name, opts) })
	return err
}

type attachments struct {
	typedstoragev1.VolumeAttachmentInterface
	c *Client
}

func (a attachments) Create(ctx context.Context, va *storagev1.VolumeAttachment, opts metav1.CreateOptions) (*storagev1.VolumeAttachment, error) {
	return call(ctx, a.c, "create", VolumeAttachments, va.Name, func() (*storagev1.VolumeAttachment, error) {
		return a.VolumeAttachmentInterface.Create(ctx, va, opts)
	})
}

func (a attachments) Update(ctx context.Context, va *storagev1.VolumeAttachment, opts metav1.UpdateOptions) (*storagev1.VolumeAttachment, error) {
	return call(ctx, a.c, "update", VolumeAttachments, va.Name, func() (*storagev1.VolumeAttachment, error) {
		return a.VolumeAttachmentInterface.Update(ctx, va, opts)
	})
}

func (a attachments) UpdateStatus(ctx context.Context, va *storagev1.VolumeAttachment, opts metav1.UpdateOptions) (*storagev1.VolumeAttachment, error) {
	return call(ctx, a.c, "update", VolumeAttachments, va.Name, func() (*storagev1.VolumeAttachment, error) {
		return a.VolumeAttachmentInterface.UpdateStatus(ctx, va, opts)
	})
}

func (a attachments) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*storagev1.VolumeAttachment, error) {
	return call(ctx, a.c, "patch", VolumeAttachments, name, func() (*storagev1.VolumeAttachment, error) {
		return a.VolumeAttachmentInterface.Patch(ctx, name, pt, data, opts, subresources...)
	})
}

func (a attachments) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	_, err := call(ctx, a.c, "delete", VolumeAttachments, name, func() (struct{}, error) {
		return struct{}{}, a.VolumeAttachmentInterface.Delete(ctx, name, opts)
	})
	return err
}
