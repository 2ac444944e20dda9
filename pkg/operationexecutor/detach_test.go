package operationexecutor

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// TestDetachCalledOffWhenAPodWantsTheVolumeAgain: a pod scheduled to the node
// while the detach confirmed node status calls it off, and the volume is listed
// again.
func TestDetachCalledOffWhenAPodWantsTheVolumeAgain(t *testing.T) {
	h, on := newDetachHarness(t, time.Minute)
	h.wanted = true
	if err := h.exec.detach(t.Context(), on, cache.NotForced); !errors.Is(err, ErrWanted) {
		t.Fatalf("detach = %v, want ErrWanted", err)
	}
	h.mu.Lock()
	asked := slices.Clone(h.confirmsAtWanted)
	h.mu.Unlock()
	if !slices.Equal(asked, []int{1}) {
		t.Errorf("Wanted asked after %v Confirm calls, want once, after the one Confirm", asked)
	}
	if h.deleteCount() != 0 {
		t.Error("deleted a VolumeAttachment a pod wants")
	}
	if got, _ := h.actual.Get(testPV.Name, testNode); !got.Reported() || got.HiddenFromNodeStatus {
		t.Errorf("attachment after the called-off detach = %+v, want listed in node status again", got)
	}
	if got := h.status.enqueuedNodes(); !slices.Equal(got, []string{testNode}) {
		t.Errorf("node status enqueued %q, want [%s]", got, testNode)
	}
}

// TestDetachDeletesEveryObjectOfThePair: another tool made a second
// VolumeAttachment of the volume on the node; each holds the volume, and each is
// deleted, with its own UID as precondition.
func TestDetachDeletesEveryObjectOfThePair(t *testing.T) {
	const extra = "csi-extra"
	for _, tc := range []struct {
		name          string
		extraDeleting bool
		wantDeleted   []string
	}{
		{name: "both live", wantDeleted: []string{extra, testVAName}},
		{name: "one already being deleted", extraDeleting: true, wantDeleted: []string{testVAName}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := newDetachHarness(t, time.Minute)
			h.addAttached(t, extra, testNode, "uid-extra", false)
			if tc.extraDeleting {
				h.actual.MarkDeleting(extra, "uid-extra")
			}
			h.informerSeesDeletes = true
			on := h.onNode(t, testNode)
			if len(on.Objects) != 2 {
				t.Fatalf("objects on the node = %+v, want 2", on.Objects)
			}
			if err := h.exec.Detach(t.Context(), on, cache.NotForced); err != nil {
				t.Fatalf("Detach: %v", err)
			}
			if tc.extraDeleting {
				// The informer still shows it: the detach waits for it too.
				h.waitWaiting(t, extra)
				h.exec.ObserveVolumeAttachment(extra, nil)
			}
			h.waitDone(t)
			if h.operations("detach", "success") != 1 {
				t.Error("the detach did not succeed")
			}
			h.mu.Lock()
			deletes := slices.Clone(h.deletes)
			h.mu.Unlock()
			var names []string
			for _, d := range deletes {
				names = append(names, d.GetName())
				want := map[string]types.UID{testVAName: vaUID, extra: "uid-extra"}[d.GetName()]
				if pre := d.GetDeleteOptions().Preconditions; pre == nil || pre.UID == nil || *pre.UID != want {
					t.Errorf("delete of %s: preconditions %+v, want uid %s", d.GetName(), pre, want)
				}
			}
			slices.Sort(names)
			slices.Sort(tc.wantDeleted)
			if !slices.Equal(names, tc.wantDeleted) {
				t.Errorf("deleted %q, want %q", names, tc.wantDeleted)
			}
			if got := h.onNode(t, testNode); !got.Deleting() {
				t.Errorf("after the detach %+v, want every object deleting", got)
			}
		})
	}
}

// TestRWXDetachesOfTwoNodesRunAtOnce guards against "RWX detaches one node at a
// time": the detach of a multi-attach volume holds only its node, so the detach
// from another node starts at once; a single-attach volume's holds it all.
func TestRWXDetachesOfTwoNodesRunAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name        string
		multiAttach bool
		wantSecond  error
	}{
		{name: "multi-attach", multiAttach: true},
		{name: "single-attach", multiAttach: false, wantSecond: ErrPending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newExecHarness(t, time.Minute)
			for i, node := range []string{testNode, otherNode} {
				h.addAttached(t, vaName(node), node, types.UID(fmt.Sprint("uid-", i)), tc.multiAttach)
			}
			if err := h.exec.Detach(t.Context(), h.onNode(t, testNode), cache.NotForced); err != nil {
				t.Fatalf("first Detach: %v", err)
			}
			h.waitWaiting(t, vaName(testNode))
			err := h.exec.Detach(t.Context(), h.onNode(t, otherNode), cache.NotForced)
			if !errors.Is(err, tc.wantSecond) || (tc.wantSecond == nil && err != nil) {
				t.Fatalf("Detach from %s while %s detaches = %v, want %v", otherNode, testNode, err, tc.wantSecond)
			}
			if got := h.exec.IsRunning(testPV.Name, "node-3"); got != !tc.multiAttach {
				t.Errorf("IsRunning on an uninvolved node = %v, want %v", got, !tc.multiAttach)
			}
			ops := 1
			if err == nil {
				ops = 2
				h.waitWaiting(t, vaName(otherNode))
				h.exec.ObserveVolumeAttachment(vaName(otherNode), nil)
			}
			h.exec.ObserveVolumeAttachment(vaName(testNode), nil)
			for range ops {
				h.waitDone(t)
			}
			if got := h.operations("detach", "success"); got != float64(ops) {
				t.Errorf("%v detaches succeeded, want %d", got, ops)
			}
		})
	}
}
