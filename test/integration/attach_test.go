package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

// TestAttachAndDetach follows one RWO volume through attach and detach and checks
// every name and field kubelet and the external-attacher rely on.
func TestAttachAndDetach(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	node := s.Nodes[0]
	vol := s.AttachedVolume("data", "app", node)

	// The VolumeAttachment: csi-<sha256(handle+driver+node)>, spec as the contract says.
	sum := sha256.Sum256([]byte(vol.Handle + s.Driver + node))
	name := "csi-" + hex.EncodeToString(sum[:])
	va, err := s.Client.StorageV1().VolumeAttachments().Get(context.Background(), name, metav1.GetOptions{})
	s.Must(err)
	if va.Spec.Attacher != s.Driver || va.Spec.NodeName != node || va.Spec.Source.PersistentVolumeName == nil ||
		*va.Spec.Source.PersistentVolumeName != vol.PV || va.Spec.Source.InlineVolumeSpec != nil {
		t.Fatalf("VolumeAttachment spec = %+v, want attacher %s, node %s, persistentVolumeName %s", va.Spec, s.Driver, node, vol.PV)
	}
	// Node status: {name: kubernetes.io/csi/<driver>^<handle>, devicePath: ""}.
	n, err := s.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	s.Must(err)
	want := v1.AttachedVolume{Name: v1.UniqueVolumeName("kubernetes.io/csi/" + s.Driver + "^" + vol.Handle), DevicePath: ""}
	if len(n.Status.VolumesAttached) != 1 || n.Status.VolumesAttached[0] != want {
		t.Fatalf("volumesAttached = %+v, want [%+v]", n.Status.VolumesAttached, want)
	}
	s.WaitEvent("app", `Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "`+vol.PV+`" `)
	if len(s.Attachments()) != 1 {
		t.Fatalf("VolumeAttachments = %d, want 1", len(s.Attachments()))
	}

	s.DeletePod("app")
	s.WaitDetached(vol, node)
}

// TestRWOVolumeMovesBetweenNodes moves a single-attach volume from node A to node
// B: B waits, with one "Waiting for detach" event, until A has released it.
func TestRWOVolumeMovesBetweenNodes(t *testing.T) {
	s := newScenario(t, scenarioOptions{SimOptions: suite.SimOptions{UnmountDelay: 500 * time.Millisecond}})
	a, b := s.Nodes[0], s.Nodes[1]
	vol := s.AttachedVolume("data", "first", a)

	s.CreatePod("second", b, vol.Claim)
	multi := `Warning FailedAttachVolume Waiting for detach for volume "` + vol.PV + `" Volume is already used by pod(s) first`
	s.WaitEvent("second", multi)
	s.Never(time.Second, "a VolumeAttachment on B while A holds the volume", func() bool { return s.HasAttachment(vol, b) })

	s.DeletePod("first")
	sawBWhileA := false
	s.Eventually("the volume attached to B", func() bool {
		if s.HasAttachment(vol, b) && s.HasAttachment(vol, a) {
			sawBWhileA = true
		}
		return s.InNodeStatus(b, vol)
	})
	if sawBWhileA {
		t.Fatal("B had a VolumeAttachment while A's still existed")
	}
	if n := countEqual(s.PodEvents("second"), multi); n != 1 {
		t.Fatalf(`"Waiting for detach" events on the waiting pod = %d, want 1 per wait`, n)
	}
}

// TestWaitingForDetachEventHidesOtherNamespaces: a pod must not learn the names of
// pods in other namespaces.
func TestWaitingForDetachEventHidesOtherNamespaces(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	a, b := s.Nodes[0], s.Nodes[1]
	vol := s.AttachedVolume("data", "owner", a)

	// A pod in another namespace cannot use the claim, but an inline in-tree volume
	// could name the same disk; here a second claim in another namespace is bound to
	// a second PV with the same handle, which is the same volume.
	other := suite.NewWorld(t, s.Client, "o-"+s.Namespace, s.Driver, s.Nodes)
	t.Cleanup(func() {
		_ = s.Client.CoreV1().Pods(other.Namespace).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	vol2 := other.CreateVolume("data", workload.VolumeOptions{Handle: vol.Handle})
	other.CreatePod("intruder", b, vol2.Claim)
	other.WaitEvent("intruder", `Warning FailedAttachVolume Waiting for detach for volume "`+vol2.PV+`" Volume is already used by 1 pod(s) in different namespaces`)
	other.DeletePod("intruder")
	other.Eventually("the intruder pod gone", func() bool {
		_, err := s.Client.CoreV1().Pods(other.Namespace).Get(context.Background(), "intruder", metav1.GetOptions{})
		return err != nil
	})
}

// TestRWXVolumeOnTwoNodes attaches a ReadWriteMany volume to two nodes at once.
func TestRWXVolumeOnTwoNodes(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	vol := s.CreateVolume("shared", workload.VolumeOptions{Modes: []v1.PersistentVolumeAccessMode{v1.ReadWriteMany}})
	s.CreatePod("one", s.Nodes[0], vol.Claim)
	s.CreatePod("two", s.Nodes[1], vol.Claim)
	s.WaitAttached(vol, s.Nodes[0])
	s.WaitAttached(vol, s.Nodes[1])
	for _, e := range s.PodEvents("two") {
		if e != `Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "`+vol.PV+`" ` {
			t.Fatalf("unexpected event on an RWX pod: %s", e)
		}
	}
}

// TestAttachErrorBecomesEvent: status.attachError is reported on the pod, and the
// attach is retried until the driver succeeds.
func TestAttachErrorBecomesEvent(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	vol := s.CreateVolume("flaky", workload.VolumeOptions{})
	s.Attacher.FailAttach(vol.Handle, "rpc error: code = Internal desc = disk is busy")
	s.CreatePod("app", s.Nodes[0], vol.Claim)
	s.WaitEvent("app", `Warning FailedAttachVolume AttachVolume.Attach failed for volume "`+vol.PV+`" : rpc error: code = Internal desc = disk is busy`)
	s.Attacher.ClearFailures(vol.Handle)
	s.WaitAttached(vol, s.Nodes[0])
	s.WaitEvent("app", `Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "`+vol.PV+`" `)
}
