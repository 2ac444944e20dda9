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
// on the reads of nodes, pods and VolumeAttachments and on the lists of every
// resource an informer watches, outside the fake clientset's lock, so that a
// delayed request holds back only its caller.
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

func (x coreV1) Pods(namespace string) typedcorev1.PodInterface {
	return pods{PodInterface: x.CoreV1Interface.Pods(namespace), c: x.c}
}

func (x coreV1) PersistentVolumes() typedcorev1.PersistentVolumeInterface {
	return pvs{PersistentVolumeInterface: x.CoreV1Interface.PersistentVolumes(), c: x.c}
}

func (x coreV1) PersistentVolumeClaims(namespace string) typedcorev1.PersistentVolumeClaimInterface {
	return pvcs{PersistentVolumeClaimInterface: x.CoreV1Interface.PersistentVolumeClaims(namespace), c: x.c}
}

// listCached tells whether a list may be served from a watch cache: what an
// informer's first list asks for.
func listCached(opts metav1.ListOptions) bool { return opts.ResourceVersion == "0" }

type pods struct {
	typedcorev1.PodInterface
	c *Client
}

func (p pods) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Pod, error) {
	return read(ctx, p.c, "get", Pods, name, false, func() (*corev1.Pod, error) { return p.PodInterface.Get(ctx, name, opts) })
}

func (p pods) List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	return read(ctx, p.c, "list", Pods, "", listCached(opts), func() (*corev1.PodList, error) { return p.PodInterface.List(ctx, opts) })
}

type pvs struct {
	typedcorev1.PersistentVolumeInterface
	c *Client
}

func (p pvs) List(ctx context.Context, opts metav1.ListOptions) (*corev1.PersistentVolumeList, error) {
	return read(ctx, p.c, "list", PVs, "", listCached(opts), func() (*corev1.PersistentVolumeList, error) {
		return p.PersistentVolumeInterface.List(ctx, opts)
	})
}

type pvcs struct {
	typedcorev1.PersistentVolumeClaimInterface
	c *Client
}

func (p pvcs) List(ctx context.Context, opts metav1.ListOptions) (*corev1.PersistentVolumeClaimList, error) {
	return read(ctx, p.c, "list", PVCs, "", listCached(opts), func() (*corev1.PersistentVolumeClaimList, error) {
		return p.PersistentVolumeClaimInterface.List(ctx, opts)
	})
}

type storageV1 struct {
	typedstoragev1.StorageV1Interface
	c *Client
}

func (x storageV1) VolumeAttachments() typedstoragev1.VolumeAttachmentInterface {
	return attachments{VolumeAttachmentInterface: x.StorageV1Interface.VolumeAttachments(), c: x.c}
}

func (x storageV1) CSIDrivers() typedstoragev1.CSIDriverInterface {
	return drivers{CSIDriverInterface: x.StorageV1Interface.CSIDrivers(), c: x.c}
}

func (x storageV1) CSINodes() typedstoragev1.CSINodeInterface {
	return csiNodes{CSINodeInterface: x.StorageV1Interface.CSINodes(), c: x.c}
}

type drivers struct {
	typedstoragev1.CSIDriverInterface
	c *Client
}

func (d drivers) List(ctx context.Context, opts metav1.ListOptions) (*storagev1.CSIDriverList, error) {
	return read(ctx, d.c, "list", CSIDrivers, "", listCached(opts), func() (*storagev1.CSIDriverList, error) {
		return d.CSIDriverInterface.List(ctx, opts)
	})
}

type csiNodes struct {
	typedstoragev1.CSINodeInterface
	c *Client
}

func (n csiNodes) List(ctx context.Context, opts metav1.ListOptions) (*storagev1.CSINodeList, error) {
	return read(ctx, n.c, "list", CSINodes, "", listCached(opts), func() (*storagev1.CSINodeList, error) {
		return n.CSINodeInterface.List(ctx, opts)
	})
}

type nodes struct {
	typedcorev1.NodeInterface
	c *Client
}

func (n nodes) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error) {
	return read(ctx, n.c, "get", Nodes, name, false, func() (*corev1.Node, error) { return n.NodeInterface.Get(ctx, name, opts) })
}

func (n nodes) List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	return read(ctx, n.c, "list", Nodes, "", listCached(opts), func() (*corev1.NodeList, error) { return n.NodeInterface.List(ctx, opts) })
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

func (a attachments) Get(ctx context.Context, name string, opts metav1.GetOptions) (*storagev1.VolumeAttachment, error) {
	return read(ctx, a.c, "get", VolumeAttachments, name, false, func() (*storagev1.VolumeAttachment, error) {
		return a.VolumeAttachmentInterface.Get(ctx, name, opts)
	})
}

func (a attachments) List(ctx context.Context, opts metav1.ListOptions) (*storagev1.VolumeAttachmentList, error) {
	return read(ctx, a.c, "list", VolumeAttachments, "", listCached(opts), func() (*storagev1.VolumeAttachmentList, error) {
		return a.VolumeAttachmentInterface.List(ctx, opts)
	})
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
