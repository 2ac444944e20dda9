package operationexecutor

import (
	"errors"
	"testing"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// TestAttachChecksHoldersUnderTheLock guards against "decisions on a stale
// snapshot": the caller decided from a snapshot of the actual state taken before
// the attach to node A started; the executor must look again once it holds the
// volume's lock.
func TestAttachChecksHoldersUnderTheLock(t *testing.T) {
	h := newExecHarness(t, time.Minute)
	h.informerSeesCreates = true
	snapshot := h.actual.Volume(testPV.Name)

	if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
		t.Fatalf("Attach to %s: %v", testNode, err)
	}
	// While the attach to A runs, the lock answers.
	if err := h.exec.Attach(t.Context(), testPV, otherNode, testPods); !errors.Is(err, ErrPending) {
		t.Errorf("Attach to %s while the attach to %s runs = %v, want ErrPending", otherNode, testNode, err)
	}
	h.completeAttach(t, testNode)

	// The caller's snapshot still shows nobody holding the volume...
	if len(snapshot) != 0 {
		t.Fatalf("snapshot = %+v, want empty", snapshot)
	}
	// ...but the executor does not decide on it.
	err := h.exec.Attach(t.Context(), testPV, otherNode, testPods)
	h.wantHeld(t, err, otherNode, testNode)
}

// TestAttachRefusesASingleAttachVolumeHeldElsewhere: whatever holds the volume on
// another node, known from the informer, from a create without an answer, or from
// a VolumeAttachment whose volume is not identified yet, refuses a single-attach
// volume and only that.
func TestAttachRefusesASingleAttachVolumeHeldElsewhere(t *testing.T) {
	tests := []struct {
		name      string
		setup     func(t *testing.T, h *execHarness)
		vol       cache.Volume
		wantHeld  []string
		wantStart bool
	}{
		{
			name:      "nothing anywhere",
			setup:     func(*testing.T, *execHarness) {},
			vol:       testPV,
			wantStart: true,
		},
		{
			name:     "attached on another node",
			setup:    func(t *testing.T, h *execHarness) { h.addAttached(t, vaName(testNode), testNode, vaUID, false) },
			vol:      testPV,
			wantHeld: []string{testNode},
		},
		{
			name: "being deleted on another node",
			setup: func(t *testing.T, h *execHarness) {
				h.actual.Observe(cache.Observation{Volume: testPV.Name, Node: testNode, VolumeAttachment: vaName(testNode), UID: vaUID, Attached: true, Deleting: true})
			},
			vol:      testPV,
			wantHeld: []string{testNode},
		},
		{
			name: "a create without an answer on another node",
			setup: func(t *testing.T, h *execHarness) {
				h.actual.BeginCreate(testPV.Name, testNode, vaName(testNode), false)
			},
			vol:      testPV,
			wantHeld: []string{testNode},
		},
		{
			name: "an unidentified VolumeAttachment naming the PV on two nodes",
			setup: func(t *testing.T, h *execHarness) {
				h.actual.ObserveUnresolved(cache.UnresolvedAttachment{VolumeAttachment: "csi-x", PVName: testPV.PVName, Node: "node-4"})
				h.actual.ObserveUnresolved(cache.UnresolvedAttachment{VolumeAttachment: "csi-y", PVName: testPV.PVName, Node: "node-3"})
			},
			vol:      testPV,
			wantHeld: []string{"node-3", "node-4"},
		},
		{
			name: "an unidentified VolumeAttachment of another PV",
			setup: func(t *testing.T, h *execHarness) {
				h.actual.ObserveUnresolved(cache.UnresolvedAttachment{VolumeAttachment: "csi-x", PVName: "pv-other", Node: "node-3"})
			},
			vol:       testPV,
			wantStart: true,
		},
		{
			name:      "multi-attach volume attached on another node",
			setup:     func(t *testing.T, h *execHarness) { h.addAttached(t, vaName(testNode), testNode, vaUID, true) },
			vol:       testRWX,
			wantStart: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, time.Minute)
			h.informerSeesCreates = true
			tc.setup(t, h)
			err := h.exec.Attach(t.Context(), tc.vol, otherNode, testPods)
			if !tc.wantStart {
				h.wantHeld(t, err, otherNode, tc.wantHeld...)
				return
			}
			if err != nil {
				t.Fatalf("Attach = %v, want it started", err)
			}
			h.completeAttach(t, otherNode)
		})
	}
}
