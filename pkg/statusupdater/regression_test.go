package statusupdater_test

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The informer's copy of the node can be newer than the base of the last patch and
// older than the patch itself. A volume taken out of node status must then still be
// taken out on the API server, and the node returned must be the server's.
func TestConfirmDoesNotTrustAStaleInformerCopy(t *testing.T) {
	h := newHarness(t, managedNode("1", csiEntry(volA)), managedNode("1", csiEntry(volA)))
	h.attach(volA, true)
	h.attach(volB, true)
	ctx := context.Background()
	if _, err := h.updater.Sync(ctx, nodeName); err != nil {
		t.Fatal(err)
	}
	// The informer now shows a write made before the patch landed.
	if err := h.nodes.Update(managedNode("1b", csiEntry(volA))); err != nil {
		t.Fatal(err)
	}
	h.actual.SetHiddenFromNodeStatus(volB, nodeName, true)
	got, err := h.updater.Sync(ctx, nodeName)
	if err != nil {
		t.Fatal(err)
	}
	server, err := h.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	listed := func(n *v1.Node) bool {
		return slices.ContainsFunc(n.Status.VolumesAttached, func(av v1.AttachedVolume) bool { return av.Name == v1.UniqueVolumeName(volB) })
	}
	if listed(server) {
		t.Errorf("the API server still lists %s after it was taken out of node status: %v", volB, server.Status.VolumesAttached)
	}
	if got.ResourceVersion != server.ResourceVersion {
		t.Errorf("returned node at resourceVersion %q, the API server's is at %q", got.ResourceVersion, server.ResourceVersion)
	}
}
