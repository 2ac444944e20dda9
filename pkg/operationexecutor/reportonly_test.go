package operationexecutor

import (
	"context"
	"errors"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

var testISCSI = cache.Volume{
	Name:        volumename.ISCSI("10.0.0.1:3260", "iqn.2001-04.com.example:disk1", 0),
	PVName:      "pv-iscsi",
	DisplayName: "pv-iscsi",
}

func TestAttachReportOnlyWritesNoVolumeAttachment(t *testing.T) {
	h := newExecHarness(t, waitLimit)
	if err := h.exec.Attach(context.Background(), testISCSI, testNode, testPods); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if len(h.client.Actions()) != 0 {
		t.Errorf("API requests = %v, want none: an iSCSI volume has no VolumeAttachment", h.client.Actions())
	}
	if got := h.actual.ReportedVolumes(testNode); !slices.Equal(got, []volumename.UniqueName{testISCSI.Name}) {
		t.Errorf("node status would list %v, want %v", got, testISCSI.Name)
	}
	if got := h.status.enqueuedNodes(); !slices.Equal(got, []string{testNode}) {
		t.Errorf("node status writes asked for %v, want %v", got, testNode)
	}
	want := `Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "pv-iscsi" `
	if got := h.events(); !slices.Equal(got, []string{want}) {
		t.Errorf("events = %q, want %q", got, want)
	}
	if h.anyRunning(testISCSI.Name) {
		t.Error("the attach still holds the volume's lock")
	}
}

func TestAttachReportOnlyRefusedWhileAnotherNodeHoldsIt(t *testing.T) {
	h := newExecHarness(t, waitLimit)
	h.actual.AddReportOnly(testISCSI.Name, "node-2", false)
	err := h.exec.Attach(context.Background(), testISCSI, testNode, testPods)
	var held *HeldError
	if !errors.As(err, &held) || !slices.Equal(held.Nodes, []string{"node-2"}) {
		t.Fatalf("Attach = %v, want a HeldError naming node-2", err)
	}
	if _, ok := h.actual.Get(testISCSI.Name, testNode); ok {
		t.Error("a refused attach recorded the volume on the node")
	}
}

func TestDetachReportOnly(t *testing.T) {
	tests := []struct {
		name     string
		inUse    bool
		force    cache.ForceRule
		notReady bool
		// confirmErr makes the node status write fail.
		confirmErr error
		wantGone   bool
		wantShown  bool
	}{
		{name: "not in use", wantGone: true},
		{name: "node status write fails: kept, listed again", confirmErr: errors.New("node status patch refused"), wantShown: true},
		{name: "in use", inUse: true, wantShown: true},
		{name: "in use on a node out of service", inUse: true, force: cache.ForcedOutOfService, wantGone: true},
		{name: "in use after the unmount wait on a node not Ready", inUse: true, force: cache.ForcedOnTimeout, notReady: true, wantGone: true},
		{name: "in use after the unmount wait on a node Ready again", inUse: true, force: cache.ForcedOnTimeout, wantShown: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, waitLimit)
			h.actual.AddReportOnly(testISCSI.Name, testNode, false)
			if tc.inUse {
				h.status.node.Status.VolumesInUse = []v1.UniqueVolumeName{v1.UniqueVolumeName(testISCSI.Name)}
			}
			if tc.notReady {
				h.status.node.Status.Conditions[0].Status = v1.ConditionFalse
			}
			if tc.force == cache.ForcedOutOfService {
				h.status.node.Spec.Taints = []v1.Taint{{Key: cache.OutOfServiceTaint, Effect: v1.TaintEffectNoExecute}}
			}
			h.status.err = tc.confirmErr
			on, _ := h.actual.Get(testISCSI.Name, testNode)
			if err := h.exec.Detach(context.Background(), on, tc.force); err != nil {
				t.Fatalf("Detach: %v", err)
			}
			h.waitDoneFor(t, testISCSI.Name)
			if got := h.status.reportedAtConfirm; len(got) != 1 || len(got[0]) != 0 {
				t.Errorf("node status at Confirm would list %v, want nothing", got)
			}
			_, recorded := h.actual.Get(testISCSI.Name, testNode)
			if recorded == tc.wantGone {
				t.Errorf("recorded after the detach = %v, want %v", recorded, !tc.wantGone)
			}
			shown := slices.Contains(h.actual.ReportedVolumes(testNode), testISCSI.Name)
			if shown != tc.wantShown {
				t.Errorf("node status lists the volume after the detach = %v, want %v", shown, tc.wantShown)
			}
			if n := h.deleteCount(); n != 0 {
				t.Errorf("VolumeAttachment deletes = %d, want none", n)
			}
		})
	}
}

// TestDetachReportOnlyNotOverWhileStillListed: the record of an iSCSI volume goes
// only once the node the API server returned no longer lists it (simulation seed
// 153: a write judged on an older node kept it listed).
func TestDetachReportOnlyNotOverWhileStillListed(t *testing.T) {
	h := newExecHarness(t, waitLimit)
	h.actual.AddReportOnly(testISCSI.Name, testNode, false)
	h.status.node.Status.VolumesAttached = []v1.AttachedVolume{{Name: v1.UniqueVolumeName(testISCSI.Name)}}
	on, _ := h.actual.Get(testISCSI.Name, testNode)
	if err := h.exec.Detach(context.Background(), on, cache.NotForced); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	h.waitDoneFor(t, testISCSI.Name)
	if _, recorded := h.actual.Get(testISCSI.Name, testNode); !recorded {
		t.Error("the record went while node status still lists the volume")
	}
	if holders := h.actual.Holders(testISCSI.Name, "", "node-2"); !slices.Equal(holders, []string{testNode}) {
		t.Errorf("holders = %v, want %s", holders, testNode)
	}
}

// TestForcedReportOnlyDetachReadsThePodsBeforeTheStatusWrite: an iSCSI or FC
// volume is detached by the node status write that takes it out, so a detach
// forced by the end of the wait for unmount reads the node's pods before that
// write, not after. Before, the write went out first and the pod read then
// called the detach off: too late, the volume had left volumesAttached while a
// pod the informer had not shown needed it (simulation seed 22383).
func TestForcedReportOnlyDetachReadsThePodsBeforeTheStatusWrite(t *testing.T) {
	h := newExecHarness(t, waitLimit)
	h.actual.AddReportOnly(testISCSI.Name, testNode, false)
	h.status.node.Status.VolumesInUse = []v1.UniqueVolumeName{v1.UniqueVolumeName(testISCSI.Name)}
	h.status.node.Status.Conditions[0].Status = v1.ConditionFalse
	h.neededOnNode = true
	on, _ := h.actual.Get(testISCSI.Name, testNode)
	if err := h.exec.detach(t.Context(), on, cache.ForcedOnTimeout); !errors.Is(err, ErrWanted) {
		t.Fatalf("detach = %v, want ErrWanted", err)
	}
	if n := h.status.confirmCount(); n != 0 {
		t.Errorf("%d node status writes before the pods were read, want none", n)
	}
	if !slices.Contains(h.actual.ReportedVolumes(testNode), testISCSI.Name) {
		t.Error("the volume a pod needs left what node status lists")
	}
}
