package operationexecutor

import (
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
)

// TestWaitsForTellsOnlyWhileAnOperationWaitsForTheObject: the controller leaves
// a volume off the queue on news of a VolumeAttachment only while an operation
// waits for that object, since only then does the operation's end (Done) queue
// it afterwards.
func TestWaitsForTellsOnlyWhileAnOperationWaitsForTheObject(t *testing.T) {
	h := newExecHarness(t, time.Minute)
	h.informerSeesCreates = true
	if h.exec.WaitsFor(testVAName) {
		t.Fatal("WaitsFor before any operation = true, want false")
	}
	if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	h.waitWaiting(t, testVAName)
	if h.exec.WaitsFor("another") {
		t.Error("WaitsFor(another object) = true, want false")
	}
	h.exec.ObserveVolumeAttachment(testVAName, withStatus(attachedObject(), func(va *storagev1.VolumeAttachment) { va.Status.Attached = true }))
	h.waitDone(t)
	if h.exec.WaitsFor(testVAName) {
		t.Error("WaitsFor once the attach ended = true, want false")
	}
}
