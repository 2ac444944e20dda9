package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// listedResources returns, sorted and once each, the resources client was asked
// to list.
func listedResources(client *fake.Clientset) []string {
	var out []string
	for _, a := range client.Actions() {
		if a.GetVerb() == "list" {
			out = append(out, a.GetResource().Resource)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestReadablesAreWhatTheInformersRead: CheckCanList (and the permissions explain
// names) covers exactly the resources the controller's informers list.
func TestReadablesAreWhatTheInformersRead(t *testing.T) {
	informed := fake.NewClientset()
	factory := NewInformerFactory(informed)
	defer factory.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := newInformerSet(factory); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("informer for %v did not sync", typ)
		}
	}

	checked := fake.NewClientset()
	if err := CheckCanList(ctx, checked); err != nil {
		t.Fatalf("CheckCanList: %v", err)
	}
	want := listedResources(informed)
	if got := listedResources(checked); !slices.Equal(got, want) {
		t.Errorf("CheckCanList lists %v, the informers %v", got, want)
	}
	if got := slices.Sorted(slices.Values(ReadResources())); !slices.Equal(got, want) {
		t.Errorf("ReadResources = %v, the informers list %v", got, want)
	}
	for _, a := range checked.Actions() {
		if l, ok := a.(k8stesting.ListActionImpl); !ok || l.ListOptions.Limit != 1 {
			t.Errorf("CheckCanList did %v, want lists of one object", a)
		}
	}
}
