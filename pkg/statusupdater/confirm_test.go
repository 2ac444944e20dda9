package statusupdater_test

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

// The informer's copy of the node can be newer than the base of the last patch and
// older than the patch itself. A volume taken out of node status must then still be
// taken out on the API server, and the node returned must be the server's.
func TestConfirmDoesNotTrustAStaleInformerCopy(t *testing.T) {
	h := newHarness(t, managedNode("1", csiEntry(volA)), managedNode("1", csiEntry(volA)))
	h.attach(volA, true)
	h.attach(volB, true)
	ctx := context.Background()
	if err := h.updater.Sync(ctx, nodeName); err != nil {
		t.Fatal(err)
	}
	// The informer now shows a write made before the patch landed.
	if err := h.nodes.Update(managedNode("1b", csiEntry(volA))); err != nil {
		t.Fatal(err)
	}
	h.actual.SetHiddenFromNodeStatus(volB, nodeName, true)
	got, err := h.updater.Confirm(ctx, nodeName)
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

func TestConfirm(t *testing.T) {
	tests := []struct {
		name        string
		informer    *v1.Node
		server      *v1.Node
		wantVerbs   []string
		wantListedA bool
	}{
		{
			name:      "volume still listed: one patch, its answer returned",
			informer:  managedNode("1", csiEntry(volA)),
			server:    managedNode("1", csiEntry(volA)),
			wantVerbs: []string{"patch"},
		},
		{
			name:      "informer shows it gone: read the server, which agrees",
			informer:  managedNode("1"),
			server:    managedNode("1"),
			wantVerbs: []string{"get"},
		},
		{
			name:      "informer shows it gone, the server still lists it: read, then patch",
			informer:  managedNode("1"),
			server:    managedNode("2", csiEntry(volA)),
			wantVerbs: []string{"get", "patch"},
		},
		{
			name:      "node gone",
			wantVerbs: []string{"get"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var server []runtime.Object
			if tc.server != nil {
				server = append(server, tc.server)
			}
			h := newHarness(t, tc.informer, server...)
			h.attach(volA, true)
			h.actual.SetHiddenFromNodeStatus(volA, nodeName, true)
			got, err := h.updater.Confirm(context.Background(), nodeName)
			if err != nil {
				t.Fatal(err)
			}
			var verbs []string
			for _, a := range h.client.Actions() {
				verbs = append(verbs, a.GetVerb())
			}
			if !slices.Equal(verbs, tc.wantVerbs) {
				t.Errorf("requests = %v, want %v", verbs, tc.wantVerbs)
			}
			if tc.server == nil {
				if got != nil {
					t.Errorf("Confirm() = %v for a node that is gone, want nil", got)
				}
				return
			}
			if got == nil || slices.ContainsFunc(got.Status.VolumesAttached, func(av v1.AttachedVolume) bool { return av.Name == v1.UniqueVolumeName(volA) }) {
				t.Errorf("Confirm() = %v, want the server's node without %s", got, volA)
			}
		})
	}
}

// A confirmation asked for while a patch is on its way cannot trust that patch:
// the caller's change may have come too late for it.
func TestConfirmAfterAPatchOnItsWayReadsAgain(t *testing.T) {
	h := newHarness(t, managedNode("1", csiEntry(volA), csiEntry(volB)), managedNode("1", csiEntry(volA), csiEntry(volB)))
	h.attach(volA, true)
	h.attach(volB, true)
	h.actual.SetHiddenFromNodeStatus(volA, nodeName, true)
	h.actual.SetHiddenFromNodeStatus(volB, nodeName, true)
	blocked := make(chan struct{})
	release := make(chan struct{})
	h.client.PrependReactor("patch", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
		close(blocked)
		<-release
		return false, nil, nil
	})
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		_, err := h.updater.Confirm(ctx, nodeName)
		first <- err
	}()
	<-blocked
	second := make(chan error, 1)
	go func() {
		_, err := h.updater.Confirm(ctx, nodeName)
		second <- err
	}()
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if n := len(h.client.Actions()); n != 2 {
		t.Errorf("%d requests, want 2: one patch, and one read for the call made while the patch was on its way", n)
	}
}
