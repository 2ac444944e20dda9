package metadataview

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
)

func TestListKeepsOnlyMetadata(t *testing.T) {
	objects := []runtime.Object{
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "a", UID: "pod-uid"}, Spec: corev1.PodSpec{NodeName: "n"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "b", UID: "other-pod-uid"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "node-uid"}},
		&storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va", UID: "va-uid"}, Spec: storagev1.VolumeAttachmentSpec{NodeName: "n"}},
	}
	view := Of(fake.NewClientset(objects...))
	for _, tc := range []struct {
		resource  schema.GroupVersionResource
		namespace string
		want      []string
	}{
		{corev1.SchemeGroupVersion.WithResource("pods"), "", []string{"a/p pod-uid", "b/p other-pod-uid"}},
		{corev1.SchemeGroupVersion.WithResource("pods"), "b", []string{"b/p other-pod-uid"}},
		{corev1.SchemeGroupVersion.WithResource("nodes"), "", []string{"/n node-uid"}},
		{storagev1.SchemeGroupVersion.WithResource("volumeattachments"), "", []string{"/va va-uid"}},
	} {
		t.Run(tc.resource.Resource+"/"+tc.namespace, func(t *testing.T) {
			list, err := view.Resource(tc.resource).Namespace(tc.namespace).List(t.Context(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if list.Kind != "PartialObjectMetadataList" || list.ResourceVersion == "" {
				t.Errorf("list kind %q, resourceVersion %q: want a PartialObjectMetadataList with the list's resourceVersion", list.Kind, list.ResourceVersion)
			}
			var got []string
			for _, item := range list.Items {
				if item.Kind != "PartialObjectMetadata" {
					t.Errorf("item %s has kind %q", item.Name, item.Kind)
				}
				got = append(got, item.Namespace+"/"+item.Name+" "+string(item.UID))
			}
			if len(got) != len(tc.want) {
				t.Fatalf("listed %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("listed %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestOnlyListIsServed(t *testing.T) {
	view := Of(fake.NewClientset())
	claims := view.Resource(corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims"))
	if _, err := claims.List(t.Context(), metav1.ListOptions{}); err == nil {
		t.Error("a list of claims was served; want an error: only pods, nodes and VolumeAttachments are")
	}
	pods := view.Resource(corev1.SchemeGroupVersion.WithResource("pods"))
	if _, err := pods.Get(t.Context(), "p", metav1.GetOptions{}); err == nil {
		t.Error("a get was served; want an error")
	}
}
