package operationexecutor

import (
	"errors"
	"slices"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// TestAttachObservedReportsOnlyAFailedAttach: the success event for an attach the
// external-attacher finished after the operation gave up follows a failed attach,
// not a failed detach.
func TestAttachObservedReportsOnlyAFailedAttach(t *testing.T) {
	success := `Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "pv-1" `
	for _, tc := range []struct {
		name      string
		fail      func(t *testing.T) *execHarness
		wantEvent bool
	}{
		{
			name: "nothing failed",
			fail: func(t *testing.T) *execHarness {
				h, _ := newDetachHarness(t, time.Minute)
				return h
			},
		},
		{
			name: "attach failed",
			fail: func(t *testing.T) *execHarness {
				h := newExecHarness(t, time.Minute)
				h.createErr = apierrors.NewForbidden(storagev1.Resource("volumeattachments"), testVAName, errors.New("denied"))
				if err := h.exec.Attach(t.Context(), testPV, testNode, testPods); err != nil {
					t.Fatal(err)
				}
				h.waitDone(t)
				return h
			},
			wantEvent: true,
		},
		{
			name: "detach failed",
			fail: func(t *testing.T) *execHarness {
				h, on := newDetachHarness(t, time.Minute)
				h.status.err = errors.New("node status patch refused")
				if err := h.exec.Detach(t.Context(), on, cache.NotForced); err != nil {
					t.Fatal(err)
				}
				h.waitDone(t)
				return h
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.fail(t)
			h.events()
			h.exec.AttachObserved(testPV, testNode, testPods)
			got := h.events()
			want := []string(nil)
			if tc.wantEvent {
				want = []string{success}
			}
			if !slices.Equal(got, want) {
				t.Errorf("events = %q, want %q", got, want)
			}
			if h.backingOff(testPV.Name, testNode) {
				t.Error("still backing off once the volume is seen attached")
			}
		})
	}
}
