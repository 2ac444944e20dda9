package operationexecutor

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
)

// TestForcedDetachCalledOffWhenThePodsOfTheNodeCannotBeRead: a detach forced
// after the unmount timeout asks the API server whether a pod on the node needs
// the volume, since the informer may not yet show one just scheduled there. If
// that read fails, nothing says no pod does: the detach is called off, and no
// VolumeAttachment is deleted.
func TestForcedDetachCalledOffWhenThePodsOfTheNodeCannotBeRead(t *testing.T) {
	h, on := newDetachHarness(t, time.Minute)
	h.informerSeesDeletes = true
	h.status.node = inUseNode(false, false)
	h.readPodsErr = errors.New("the API server did not answer")
	err := h.exec.detach(t.Context(), on, cache.ForcedOnTimeout)
	if err == nil || !strings.Contains(err.Error(), "reading the pods of node "+testNode) {
		t.Errorf("detach = %v, want the failed read of the node's pods", err)
	}
	if n := h.deleteCount(); n != 0 {
		t.Errorf("%d deletes, want none", n)
	}
	if got, _ := h.actual.Get(testPV.Name, testNode); !got.Reported() {
		t.Errorf("attachment after the called-off detach = %+v, want listed in node status again", got)
	}
}
