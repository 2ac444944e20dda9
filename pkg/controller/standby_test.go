package controller

import (
	"testing"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/attachdetach-controller/attachdetach-controller/internal/metadataview"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
)

// TestControllerOnInformersAlreadyRunning: a standby starts the informers before it
// leads, and the controller it builds on taking over uses them as they are (the
// first version of StartInformers made New fail on the pod index it had added).
func TestControllerOnInformersAlreadyRunning(t *testing.T) {
	client := fake.NewClientset()
	factory := NewInformerFactory(client)
	t.Cleanup(factory.Shutdown)
	if err := StartInformers(t.Context(), factory); err != nil {
		t.Fatalf("StartInformers: %v", err)
	}
	for typ, ok := range factory.WaitForCacheSync(t.Context().Done()) {
		if !ok {
			t.Fatalf("informer for %v did not sync", typ)
		}
	}
	if _, err := New(Clients{API: client, NodeStatus: client, Metadata: metadataview.Of(client)}, factory, record.NewFakeRecorder(10), metrics.New(), DefaultOptions()); err != nil {
		t.Fatalf("New on running informers: %v", err)
	}
}
