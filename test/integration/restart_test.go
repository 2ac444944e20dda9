package integration

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestRestartRecovery kills the controller with volumes attached, changes the world
// while it is down, and restarts it: nothing is re-attached, nothing in use is
// detached, and what changed meanwhile is acted on.
func TestRestartRecovery(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	a, b := s.nodes[0], s.nodes[1]
	kept := s.createVolume("kept", volumeOptions{})
	moved := s.createVolume("moved", volumeOptions{})
	dropped := s.createVolume("dropped", volumeOptions{})
	s.createPod("keeper", a, kept.claim)
	s.createPod("mover", a, moved.claim)
	s.createPod("dropper", a, dropped.claim)
	for _, v := range []volume{kept, moved, dropped} {
		s.waitAttached(v, a)
	}
	uids := map[string]types.UID{}
	for _, va := range s.attachments() {
		uids[va.Name] = va.UID
	}

	s.killController()
	s.deletePod("mover")
	s.deletePod("dropper")
	s.eventually("the deleted pods gone", func() bool {
		pods, err := s.client.CoreV1().Pods(s.ns).List(s.ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 1
	})
	s.createPod("mover-b", b, moved.claim)
	time.Sleep(500 * time.Millisecond)
	s.startController()

	s.waitDetached(dropped, a)
	s.waitDetached(moved, a)
	s.waitAttached(moved, b)
	va, err := s.client.StorageV1().VolumeAttachments().Get(s.ctx, s.vaName(kept, a), metav1.GetOptions{})
	s.must(err)
	if va.UID != uids[va.Name] {
		t.Fatalf("the VolumeAttachment of a volume in use was replaced across the restart")
	}
	if !s.inNodeStatus(a, kept) {
		t.Fatalf("the volume in use left node status across the restart")
	}
}
