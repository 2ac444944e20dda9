package watchrecord

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestListPresentAsksForThePresentInLargePages: an informer's list asks for the
// present, not the API server's cache, and a paged one for pages of
// QuorumPageSize; a list client-go does not page stays unpaged.
func TestListPresentAsksForThePresentInLargePages(t *testing.T) {
	tests := []struct {
		name string
		sent metav1.ListOptions
		want metav1.ListOptions
	}{
		{name: "first list, of the cache", sent: metav1.ListOptions{ResourceVersion: "0", Limit: 500}, want: metav1.ListOptions{Limit: QuorumPageSize}},
		{name: "list after 410 Gone", sent: metav1.ListOptions{Limit: 500}, want: metav1.ListOptions{Limit: QuorumPageSize}},
		{name: "next page", sent: metav1.ListOptions{Limit: 500, Continue: "c"}, want: metav1.ListOptions{Limit: QuorumPageSize, Continue: "c"}},
		{name: "unpaged list from a version", sent: metav1.ListOptions{ResourceVersion: "12"}, want: metav1.ListOptions{ResourceVersion: "12"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got metav1.ListOptions
			list := listPresent(&Reads{}, func(_ context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				got = opts
				return &v1.PodList{}, nil
			})
			if _, err := list(context.Background(), tc.sent); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("sent %+v, want %+v", got, tc.want)
			}
		})
	}
}
