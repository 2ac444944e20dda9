package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

// stuckVolume attaches a volume to the first node, marks it mounted for good in
// the kubelet simulator and deletes its pod: the volume is wanted nowhere but is
// still in use.
func stuckVolume(t *testing.T, s *scenario) workload.Volume {
	t.Helper()
	node := s.Nodes[0]
	vol := s.AttachedVolume("data", "app", node)
	s.Must(s.Kubelet.SetStuck(node, vol.UniqueName(), true))
	s.DeletePodNow("app")
	return vol
}

// TestWaitForUnmount: a volume kubelet still lists in volumesInUse stays attached
// and in node status; once unmounted it is detached.
func TestWaitForUnmount(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	vol := stuckVolume(t, s)
	s.Never(2*time.Second, "a detach while the volume is mounted", func() bool { return !s.HasAttachment(vol, s.Nodes[0]) || !s.InNodeStatus(s.Nodes[0], vol) })
	s.Must(s.Kubelet.SetStuck(s.Nodes[0], vol.UniqueName(), false))
	s.WaitDetached(vol, s.Nodes[0])
}

// TestForceDetachAfterMaxWait: after --max-wait-for-unmount a volume still mounted
// is detached from a node that is not Ready, never from a Ready one.
func TestForceDetachAfterMaxWait(t *testing.T) {
	s := newScenario(t, scenarioOptions{controllerArgs: []string{"--max-wait-for-unmount=2s"}})
	vol := stuckVolume(t, s)
	s.Never(4*time.Second, "a force detach from a Ready node", func() bool { return !s.HasAttachment(vol, s.Nodes[0]) })
	s.Must(s.Kubelet.SetReady(t.Context(), s.Nodes[0], false))
	s.WaitDetached(vol, s.Nodes[0])
}

// TestDisableForceDetachOnTimeout: with the flag, a mounted volume stays attached
// even on a node that is not Ready.
func TestDisableForceDetachOnTimeout(t *testing.T) {
	s := newScenario(t, scenarioOptions{controllerArgs: []string{"--max-wait-for-unmount=1s", "--disable-force-detach-on-timeout"}})
	vol := stuckVolume(t, s)
	s.Must(s.Kubelet.SetReady(t.Context(), s.Nodes[0], false))
	s.Never(3*time.Second, "a force detach with force detach disabled", func() bool { return !s.HasAttachment(vol, s.Nodes[0]) })
	s.Must(s.Kubelet.SetStuck(s.Nodes[0], vol.UniqueName(), false))
	s.WaitDetached(vol, s.Nodes[0])
}

// TestUnmountWaitPerDriver: --max-wait-for-unmount-per-driver gives the world's
// driver a wait of its own, shorter than the default or never over, and leaves
// the volumes of other drivers to the default; /metrics shows the policies.
func TestUnmountWaitPerDriver(t *testing.T) {
	tests := []struct {
		name string
		// policy is DRIVER=WAIT, with DRIVER standing for the world's driver.
		policy   string
		wantKept bool
		// wantGauge is a series of max_wait_for_unmount_seconds, DRIVER as above.
		wantGauge string
	}{
		{name: "a shorter wait", policy: "DRIVER=2s", wantGauge: `{driver="DRIVER"} 2`},
		{name: "never", policy: "DRIVER=never", wantKept: true, wantGauge: `{driver="DRIVER"} +Inf`},
		{name: "another driver's wait", policy: "other.csi.example.com=2s", wantKept: true, wantGauge: `{driver="other.csi.example.com"} 2`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var driver string
			s := newScenario(t, scenarioOptions{
				controllerArgs: []string{"--http-endpoint=127.0.0.1:0"},
				worldArgs: func(w *suite.World) []string {
					driver = w.Driver
					return []string{"--max-wait-for-unmount=1h", "--max-wait-for-unmount-per-driver=" + strings.ReplaceAll(tc.policy, "DRIVER", driver)}
				},
			})
			s.Eventually("the controller serving /metrics", func() bool { return s.ctrl.HTTPAddress() != "" })
			// The policies are exported once the controller is set up, after its
			// HTTP server serves.
			want := []string{`attachdetach_controller_max_wait_for_unmount_seconds{driver=""} 3600`,
				"attachdetach_controller_max_wait_for_unmount_seconds" + strings.ReplaceAll(tc.wantGauge, "DRIVER", driver)}
			s.Eventually(fmt.Sprintf("/metrics lines %q", want), func() bool {
				lines := strings.Split(scrapeMetrics(t, s.ctrl.HTTPAddress()), "\n")
				return slices.Contains(lines, want[0]) && slices.Contains(lines, want[1])
			})
			vol := stuckVolume(t, s)
			s.Must(s.Kubelet.SetReady(t.Context(), s.Nodes[0], false))
			if !tc.wantKept {
				s.WaitDetached(vol, s.Nodes[0])
				return
			}
			s.Never(3*time.Second, "a force detach before the wait that applies is over", func() bool { return !s.HasAttachment(vol, s.Nodes[0]) })
			s.Must(s.Kubelet.SetStuck(s.Nodes[0], vol.UniqueName(), false))
			s.WaitDetached(vol, s.Nodes[0])
		})
	}
}

// TestShutdownTaint: with --detach-on-shutdown-taint, a node the cloud provider
// tainted shut down loses its volumes once it is not Ready; without the flag, or
// while the node is Ready, they stay.
func TestShutdownTaint(t *testing.T) {
	taint := []byte(`{"spec":{"taints":[{"key":"node.cloudprovider.kubernetes.io/shutdown","effect":"NoSchedule"}]}}`)
	tests := []struct {
		name      string
		args      []string
		wantMoved bool
	}{
		{name: "opted in", args: []string{"--detach-on-shutdown-taint"}, wantMoved: true},
		{name: "not opted in"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, scenarioOptions{controllerArgs: tc.args})
			a, b := s.Nodes[0], s.Nodes[1]
			vol := stuckVolume(t, s)
			s.CreatePod("replacement", b, vol.Claim)
			_, err := s.Client.CoreV1().Nodes().Patch(t.Context(), a, types.MergePatchType, taint, metav1.PatchOptions{})
			s.Must(err)
			s.Never(time.Second, "a detach from a tainted node that is Ready", func() bool { return !s.HasAttachment(vol, a) })
			s.Must(s.Kubelet.SetReady(t.Context(), a, false))
			if !tc.wantMoved {
				s.Never(2*time.Second, "a detach on the shutdown taint without the flag", func() bool { return !s.HasAttachment(vol, a) })
				s.Must(s.Kubelet.SetStuck(a, vol.UniqueName(), false))
				s.WaitDetached(vol, a)
				return
			}
			s.WaitDetached(vol, a)
			s.WaitAttached(vol, b)
		})
	}
}

// TestOutOfServiceTaint: a node tainted out-of-service gets its volumes detached at
// once, mounted or not, and the volume moves on.
func TestOutOfServiceTaint(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	a, b := s.Nodes[0], s.Nodes[1]
	vol := stuckVolume(t, s)
	s.CreatePod("replacement", b, vol.Claim)
	s.Never(time.Second, "a detach before the taint", func() bool { return !s.HasAttachment(vol, a) })
	taint := []byte(`{"spec":{"taints":[{"key":"node.kubernetes.io/out-of-service","value":"nodeshutdown","effect":"NoExecute"}]}}`)
	_, err := s.Client.CoreV1().Nodes().Patch(t.Context(), a, types.MergePatchType, taint, metav1.PatchOptions{})
	s.Must(err)
	s.WaitDetached(vol, a)
	s.WaitAttached(vol, b)
}

// TestNodeDeletion: deleting a Node object does not detach while a pod scheduled
// there exists; once the pod is gone, the volume (counted as mounted, the node as
// not Ready) is force-detached after the max wait.
func TestNodeDeletion(t *testing.T) {
	s := newScenario(t, scenarioOptions{controllerArgs: []string{"--max-wait-for-unmount=2s"}})
	node := s.Nodes[0]
	vol := s.AttachedVolume("data", "app", node)
	s.Must(s.Client.CoreV1().Nodes().Delete(t.Context(), node, metav1.DeleteOptions{}))
	s.Never(3*time.Second, "a detach while the pod on the deleted node exists", func() bool { return !s.HasAttachment(vol, node) })
	s.DeletePodNow("app")
	s.Eventually("the VolumeAttachment on the deleted node to go", func() bool { return !s.HasAttachment(vol, node) })
}

// TestTerminatedPodReleasesVolume: a pod that Succeeded no longer needs its volume.
func TestTerminatedPodReleasesVolume(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	node := s.Nodes[0]
	vol := s.AttachedVolume("data", "job", node)
	// The kubelet stand-in marks the pod Running once it has mounted its volume;
	// a Succeeded written before would be overwritten.
	s.WaitPodRunning("job")
	// The kubelet simulator writes the pod's status too: retry on conflicts.
	s.Must(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := s.Client.CoreV1().Pods(s.Namespace).Get(t.Context(), "job", metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod.Status.Phase = v1.PodSucceeded
		pod.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 0}}}}
		_, err = s.Client.CoreV1().Pods(s.Namespace).UpdateStatus(t.Context(), pod, metav1.UpdateOptions{})
		return err
	}))
	s.WaitDetached(vol, node)
}

// TestVolumeAttachmentDeletedBySomeoneElse: a VolumeAttachment deleted while still
// wanted is re-created at once.
func TestVolumeAttachmentDeletedBySomeoneElse(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	node := s.Nodes[0]
	vol := s.AttachedVolume("data", "app", node)
	old, err := s.Client.StorageV1().VolumeAttachments().Get(t.Context(), vol.AttachmentName(node), metav1.GetOptions{})
	s.Must(err)
	s.Must(s.Client.StorageV1().VolumeAttachments().Delete(t.Context(), old.Name, metav1.DeleteOptions{}))
	suite.Eventually(t, 5*time.Second, "a new VolumeAttachment", func() bool {
		va, err := s.Client.StorageV1().VolumeAttachments().Get(context.Background(), old.Name, metav1.GetOptions{})
		return err == nil && va.UID != old.UID && va.Status.Attached
	})
	s.WaitAttached(vol, node)
}
