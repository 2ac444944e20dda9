package integration

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

// TestRestartRecovery kills the controller with volumes attached, changes the world
// while it is down, and restarts it: nothing is re-attached, nothing in use is
// detached, and what changed meanwhile is acted on.
func TestRestartRecovery(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	a, b := s.Nodes[0], s.Nodes[1]
	kept := s.CreateVolume("kept", workload.VolumeOptions{})
	moved := s.CreateVolume("moved", workload.VolumeOptions{})
	dropped := s.CreateVolume("dropped", workload.VolumeOptions{})
	s.CreatePod("keeper", a, kept.Claim)
	s.CreatePod("mover", a, moved.Claim)
	s.CreatePod("dropper", a, dropped.Claim)
	for _, v := range []workload.Volume{kept, moved, dropped} {
		s.WaitAttached(v, a)
	}
	uids := map[string]types.UID{}
	for _, va := range s.Attachments() {
		uids[va.Name] = va.UID
	}

	s.killController()
	s.DeletePod("mover")
	s.DeletePod("dropper")
	s.Eventually("the deleted pods gone", func() bool {
		pods, err := s.Client.CoreV1().Pods(s.Namespace).List(t.Context(), metav1.ListOptions{})
		return err == nil && len(pods.Items) == 1
	})
	s.CreatePod("mover-b", b, moved.Claim)
	time.Sleep(500 * time.Millisecond)
	s.startController()

	s.WaitDetached(dropped, a)
	s.WaitDetached(moved, a)
	s.WaitAttached(moved, b)
	va, err := s.Client.StorageV1().VolumeAttachments().Get(t.Context(), kept.AttachmentName(a), metav1.GetOptions{})
	s.Must(err)
	if va.UID != uids[va.Name] {
		t.Fatalf("the VolumeAttachment of a volume in use was replaced across the restart")
	}
	if !s.InNodeStatus(a, kept) {
		t.Fatalf("the volume in use left node status across the restart")
	}
}
