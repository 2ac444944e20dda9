package statusupdater_test

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// TestConfirmReturnsANodeNoLongerManagedAsItIs: a node whose
// attach/detach-controller annotation was taken away is still a node, and may
// still have the volume mounted. Confirm returns it as the API server has it,
// not nil: nil means a node that does not exist, and a detach forced on a node
// that does not exist goes ahead without looking at its volumesInUse or its
// pods. Nothing is written to a node the informer already shows unmanaged.
func TestConfirmReturnsANodeNoLongerManagedAsItIs(t *testing.T) {
	unmanaged := func(resourceVersion string) *v1.Node {
		n := managedNode(resourceVersion, csiEntry(volA))
		delete(n.Annotations, cache.ManagedAnnotation)
		n.Status.VolumesInUse = []v1.UniqueVolumeName{v1.UniqueVolumeName(volA)}
		return n
	}
	tests := []struct {
		name      string
		informer  *v1.Node
		wantVerbs []string
	}{
		{name: "the informer shows it unmanaged: read only", informer: unmanaged("2"), wantVerbs: []string{"get"}},
		{name: "the informer still shows it managed: the patch's answer", informer: managedNode("1", csiEntry(volA)), wantVerbs: []string{"patch"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.informer, unmanaged("2"))
			h.attach(volA, true)
			h.actual.HideForDetach(volA, nodeName, cache.ForcedOnTimeout)
			got, err := h.updater.Confirm(context.Background(), nodeName)
			if err != nil {
				t.Fatal(err)
			}
			if got == nil || cache.IsManaged(got) || !slices.Contains(got.Status.VolumesInUse, v1.UniqueVolumeName(volA)) {
				t.Errorf("Confirm() = %+v, want the unmanaged node as the API server has it", got)
			}
			var verbs []string
			for _, a := range h.client.Actions() {
				verbs = append(verbs, a.GetVerb())
			}
			if !slices.Equal(verbs, tc.wantVerbs) {
				t.Errorf("requests = %q, want %q", verbs, tc.wantVerbs)
			}
		})
	}
}
