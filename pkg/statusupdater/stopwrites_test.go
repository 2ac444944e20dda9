package statusupdater_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	clienttesting "k8s.io/client-go/testing"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/statusupdater"
)

// TestNoPatchIsSentOnceTheLeaseIsLostDuringTheOneBefore: a confirmation may take
// two patches (the first meets a newer node, which is read, and written again).
// The lease is lost while the first is on its way: the read may still go, but
// the second patch must not be sent. The stop is checked for every request.
func TestNoPatchIsSentOnceTheLeaseIsLostDuringTheOneBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := fake.NewClientset(managedNode("2", csiEntry(volA)))
		nodes := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
		if err := nodes.Add(managedNode("1", csiEntry(volA))); err != nil {
			t.Fatal(err)
		}
		actual := cache.NewActualState()
		actual.Observe(cache.Observation{Volume: volA, Node: nodeName, VolumeAttachment: "va-a", Attached: true})
		actual.HideForDetach(volA, nodeName, cache.NotForced)
		ctx, loseLease := context.WithCancel(t.Context())
		defer loseLease()
		client.PrependReactor("patch", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
			loseLease()
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, nodeName, nil)
		})
		updater := statusupdater.New(client, corelisters.NewNodeLister(nodes), actual, &podsOnNode{}, metrics.New(), nil, 0)
		go updater.Run(ctx, 1)
		if _, err := updater.Confirm(t.Context(), nodeName); err == nil {
			t.Error("Confirm = nil after the lease was lost, want an error")
		}
		// Confirm may return as the updater stops, before its worker is done:
		// wait for every goroutine to be done or blocked.
		synctest.Wait()
		var verbs []string
		for _, a := range client.Actions() {
			verbs = append(verbs, a.GetVerb())
		}
		if want := []string{"patch", "get"}; !slices.Equal(verbs, want) {
			t.Errorf("requests = %q, want %q: no patch after the lease was lost", verbs, want)
		}
	})
}
