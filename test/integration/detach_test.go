package integration

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// stuckVolume attaches a volume to the first node, marks it mounted for good in
// the kubelet simulator and deletes its pod: the volume is wanted nowhere but is
// still in use.
func stuckVolume(t *testing.T, s *scenario) volume {
	t.Helper()
	node := s.nodes[0]
	vol := s.createVolume("data", volumeOptions{})
	s.createPod("app", node, vol.claim)
	s.waitAttached(vol, node)
	s.must(s.kubelet.SetStuck(node, string(vol.unique), true))
	s.must(s.client.CoreV1().Pods(s.ns).Delete(s.ctx, "app", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	return vol
}

// TestWaitForUnmount: a volume kubelet still lists in volumesInUse stays attached
// and in node status; once unmounted it is detached.
func TestWaitForUnmount(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	vol := stuckVolume(t, s)
	s.never(2*time.Second, "a detach while the volume is mounted", func() bool { return !s.vaExists(vol, s.nodes[0]) || !s.inNodeStatus(s.nodes[0], vol) })
	s.must(s.kubelet.SetStuck(s.nodes[0], string(vol.unique), false))
	s.waitDetached(vol, s.nodes[0])
}

// TestForceDetachAfterMaxWait: after --max-wait-for-unmount a volume still mounted
// is detached from a node that is not Ready, never from a Ready one.
func TestForceDetachAfterMaxWait(t *testing.T) {
	s := newScenario(t, scenarioOptions{controllerArgs: []string{"--max-wait-for-unmount=2s"}})
	vol := stuckVolume(t, s)
	s.never(4*time.Second, "a force detach from a Ready node", func() bool { return !s.vaExists(vol, s.nodes[0]) })
	s.must(s.kubelet.SetReady(s.ctx, s.nodes[0], false))
	s.waitDetached(vol, s.nodes[0])
}

// TestDisableForceDetachOnTimeout: with the flag, a mounted volume stays attached
// even on a node that is not Ready.
func TestDisableForceDetachOnTimeout(t *testing.T) {
	s := newScenario(t, scenarioOptions{controllerArgs: []string{"--max-wait-for-unmount=1s", "--disable-force-detach-on-timeout"}})
	vol := stuckVolume(t, s)
	s.must(s.kubelet.SetReady(s.ctx, s.nodes[0], false))
	s.never(3*time.Second, "a force detach with force detach disabled", func() bool { return !s.vaExists(vol, s.nodes[0]) })
	s.must(s.kubelet.SetStuck(s.nodes[0], string(vol.unique), false))
	s.waitDetached(vol, s.nodes[0])
}

// TestOutOfServiceTaint: a node tainted out-of-service gets its volumes detached at
// once, mounted or not, and the volume moves on.
func TestOutOfServiceTaint(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	a, b := s.nodes[0], s.nodes[1]
	vol := stuckVolume(t, s)
	s.createPod("replacement", b, vol.claim)
	s.never(time.Second, "a detach before the taint", func() bool { return !s.vaExists(vol, a) })
	taint := []byte(`{"spec":{"taints":[{"key":"node.kubernetes.io/out-of-service","value":"nodeshutdown","effect":"NoExecute"}]}}`)
	_, err := s.client.CoreV1().Nodes().Patch(s.ctx, a, types.MergePatchType, taint, metav1.PatchOptions{})
	s.must(err)
	s.waitDetached(vol, a)
	s.waitAttached(vol, b)
}

// TestNodeDeletion: deleting a Node object does not detach while a pod scheduled
// there exists; once the pod is gone, the volume (counted as mounted, the node as
// not Ready) is force-detached after the max wait.
func TestNodeDeletion(t *testing.T) {
	s := newScenario(t, scenarioOptions{controllerArgs: []string{"--max-wait-for-unmount=2s"}})
	node := s.nodes[0]
	vol := s.createVolume("data", volumeOptions{})
	s.createPod("app", node, vol.claim)
	s.waitAttached(vol, node)
	s.must(s.client.CoreV1().Nodes().Delete(s.ctx, node, metav1.DeleteOptions{}))
	s.never(3*time.Second, "a detach while the pod on the deleted node exists", func() bool { return !s.vaExists(vol, node) })
	s.must(s.client.CoreV1().Pods(s.ns).Delete(s.ctx, "app", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	s.eventually("the VolumeAttachment on the deleted node to go", func() bool { return !s.vaExists(vol, node) })
}

// TestTerminatedPodReleasesVolume: a pod that Succeeded no longer needs its volume.
func TestTerminatedPodReleasesVolume(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	node := s.nodes[0]
	vol := s.createVolume("data", volumeOptions{})
	s.createPod("job", node, vol.claim)
	s.waitAttached(vol, node)
	// The kubelet simulator writes the pod's status too: retry on conflicts.
	s.must(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := s.client.CoreV1().Pods(s.ns).Get(s.ctx, "job", metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod.Status.Phase = v1.PodSucceeded
		pod.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "c", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 0}}}}
		_, err = s.client.CoreV1().Pods(s.ns).UpdateStatus(s.ctx, pod, metav1.UpdateOptions{})
		return err
	}))
	s.waitDetached(vol, node)
}

// TestVolumeAttachmentDeletedBySomeoneElse: a VolumeAttachment deleted while still
// wanted is re-created at once.
func TestVolumeAttachmentDeletedBySomeoneElse(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	node := s.nodes[0]
	vol := s.createVolume("data", volumeOptions{})
	s.createPod("app", node, vol.claim)
	s.waitAttached(vol, node)
	old, err := s.client.StorageV1().VolumeAttachments().Get(s.ctx, s.vaName(vol, node), metav1.GetOptions{})
	s.must(err)
	s.must(s.client.StorageV1().VolumeAttachments().Delete(s.ctx, old.Name, metav1.DeleteOptions{}))
	s.eventuallyWithin(5*time.Second, "a new VolumeAttachment", func() bool {
		va, err := s.client.StorageV1().VolumeAttachments().Get(context.Background(), old.Name, metav1.GetOptions{})
		return err == nil && va.UID != old.UID && va.Status.Attached
	})
	s.waitAttached(vol, node)
}
