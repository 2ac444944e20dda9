// Package metadataview serves a typed clientset's lists as a metadata client
// (k8s.io/client-go/metadata) does: each object cut down to its type and object
// metadata. Tests and simulations give it to the controller, whose start-up
// check lists names, UIDs and resource versions only, so that a fake clientset,
// with its objects and its faults, answers those lists too. Only List is served,
// for the resources the controller lists that way: pods, nodes and
// VolumeAttachments.
package metadataview

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
)

// Of returns the metadata client whose lists are client's.
func Of(client kubernetes.Interface) metadata.Interface {
	return view{client}
}

type view struct{ client kubernetes.Interface }

func (v view) Resource(gvr schema.GroupVersionResource) metadata.Getter {
	return resource{client: v.client, gvr: gvr}
}

// resource is one resource of the view, in one namespace or ("") in all.
type resource struct {
	client    kubernetes.Interface
	gvr       schema.GroupVersionResource
	namespace string
}

func (r resource) Namespace(ns string) metadata.ResourceInterface {
	r.namespace = ns
	return r
}

func (r resource) List(ctx context.Context, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	var (
		list runtime.Object
		err  error
	)
	switch r.gvr {
	case corev1.SchemeGroupVersion.WithResource("pods"):
		list, err = r.client.CoreV1().Pods(r.namespace).List(ctx, opts)
	case corev1.SchemeGroupVersion.WithResource("nodes"):
		list, err = r.client.CoreV1().Nodes().List(ctx, opts)
	case storagev1.SchemeGroupVersion.WithResource("volumeattachments"):
		list, err = r.client.StorageV1().VolumeAttachments().List(ctx, opts)
	default:
		return nil, r.unsupported("list")
	}
	if err != nil {
		return nil, err
	}
	return cut(list)
}

// cut keeps the list's metadata and each item's, as the API server does for a
// metadata client.
func cut(list runtime.Object) (*metav1.PartialObjectMetadataList, error) {
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return nil, err
	}
	out := &metav1.PartialObjectMetadataList{
		TypeMeta: metav1.TypeMeta{APIVersion: metav1.SchemeGroupVersion.String(), Kind: "PartialObjectMetadataList"},
		ListMeta: metav1.ListMeta{ResourceVersion: lm.GetResourceVersion(), Continue: lm.GetContinue(), RemainingItemCount: lm.GetRemainingItemCount()},
	}
	err = meta.EachListItem(list, func(obj runtime.Object) error {
		m, err := meta.Accessor(obj)
		if err != nil {
			return err
		}
		item := meta.AsPartialObjectMetadata(m)
		item.TypeMeta = metav1.TypeMeta{APIVersion: metav1.SchemeGroupVersion.String(), Kind: "PartialObjectMetadata"}
		out.Items = append(out.Items, *item)
		return nil
	})
	return out, err
}

func (r resource) unsupported(verb string) error {
	return fmt.Errorf("metadataview: %s %s is not served", verb, r.gvr.Resource)
}

func (r resource) Get(context.Context, string, metav1.GetOptions, ...string) (*metav1.PartialObjectMetadata, error) {
	return nil, r.unsupported("get")
}

func (r resource) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return nil, r.unsupported("watch")
}

func (r resource) Delete(context.Context, string, metav1.DeleteOptions, ...string) error {
	return r.unsupported("delete")
}

func (r resource) DeleteCollection(context.Context, metav1.DeleteOptions, metav1.ListOptions) error {
	return r.unsupported("deletecollection")
}

func (r resource) Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (*metav1.PartialObjectMetadata, error) {
	return nil, r.unsupported("patch")
}
