package operationexecutor

import (
	"testing"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// TestDetachWaitsForWhatTheInformerStillShows: once its delete is accepted, a
// detach waits until the informer no longer shows the VolumeAttachment, also
// when the object was created by the controller and the actual state never saw
// it (the informer's store runs ahead of its handlers); it waits for nothing
// when the API server answered that the object is not there, whatever the
// informer's copy still shows.
func TestDetachWaitsForWhatTheInformerStillShows(t *testing.T) {
	tests := []struct {
		name string
		// onServer: the API server has the object.
		onServer bool
		wantWait bool
	}{
		{name: "delete accepted, the informer shows the object: waits", onServer: true, wantWait: true},
		{name: "not found on the API server, the informer's copy is stale: done", onServer: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, time.Minute)
			if tc.onServer {
				if err := h.client.Tracker().Add(attachedObject()); err != nil {
					t.Fatal(err)
				}
			}
			h.actual.BeginCreate(testPV.Name, testNode, testVAName, false)
			h.actual.Created(testVAName, vaUID)
			if err := h.vas.Add(attachedObject()); err != nil {
				t.Fatal(err)
			}
			if err := h.exec.Detach(t.Context(), h.onNode(t, testNode), cache.NotForced); err != nil {
				t.Fatalf("Detach: %v", err)
			}
			if tc.wantWait {
				h.waitWaiting(t, testVAName)
				h.exec.ObserveVolumeAttachment(testVAName, nil)
			}
			h.waitDone(t)
			if h.operations("detach", "success") != 1 {
				t.Error("the detach did not succeed")
			}
		})
	}
}
