package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAttachAndDetach follows one RWO volume through attach and detach and checks
// every name and field kubelet and the external-attacher rely on.
func TestAttachAndDetach(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	node := s.nodes[0]
	vol := s.createVolume("data", volumeOptions{})
	s.createPod("app", node, vol.claim)
	s.waitAttached(vol, node)

	// The VolumeAttachment: csi-<sha256(handle+driver+node)>, spec as the contract says.
	sum := sha256.Sum256([]byte(vol.handle + s.driver + node))
	name := "csi-" + hex.EncodeToString(sum[:])
	va, err := s.client.StorageV1().VolumeAttachments().Get(context.Background(), name, metav1.GetOptions{})
	s.must(err)
	if va.Spec.Attacher != s.driver || va.Spec.NodeName != node || va.Spec.Source.PersistentVolumeName == nil ||
		*va.Spec.Source.PersistentVolumeName != vol.pv || va.Spec.Source.InlineVolumeSpec != nil {
		t.Fatalf("VolumeAttachment spec = %+v, want attacher %s, node %s, persistentVolumeName %s", va.Spec, s.driver, node, vol.pv)
	}
	// Node status: {name: kubernetes.io/csi/<driver>^<handle>, devicePath: ""}.
	n, err := s.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	s.must(err)
	want := v1.AttachedVolume{Name: v1.UniqueVolumeName("kubernetes.io/csi/" + s.driver + "^" + vol.handle), DevicePath: ""}
	if len(n.Status.VolumesAttached) != 1 || n.Status.VolumesAttached[0] != want {
		t.Fatalf("volumesAttached = %+v, want [%+v]", n.Status.VolumesAttached, want)
	}
	s.waitEvent("app", `Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "`+vol.pv+`"`)
	if len(s.attachments()) != 1 {
		t.Fatalf("VolumeAttachments = %d, want 1", len(s.attachments()))
	}

	s.deletePod("app")
	s.waitDetached(vol, node)
}

// TestRWOVolumeMovesBetweenNodes moves a single-attach volume from node A to node
// B: B waits, with one Multi-Attach event, until A has released it.
func TestRWOVolumeMovesBetweenNodes(t *testing.T) {
	s := newScenario(t, scenarioOptions{unmountDelay: 500 * time.Millisecond})
	a, b := s.nodes[0], s.nodes[1]
	vol := s.createVolume("data", volumeOptions{})
	s.createPod("first", a, vol.claim)
	s.waitAttached(vol, a)

	s.createPod("second", b, vol.claim)
	multi := `Warning FailedAttachVolume Multi-Attach error for volume "` + vol.pv + `" Volume is already used by pod(s) first`
	s.waitEvent("second", multi)
	s.never(time.Second, "a VolumeAttachment on B while A holds the volume", func() bool { return s.vaExists(vol, b) })

	s.deletePod("first")
	sawBWhileA := false
	s.eventually("the volume attached to B", func() bool {
		if s.vaExists(vol, b) && s.vaExists(vol, a) {
			sawBWhileA = true
		}
		return s.inNodeStatus(b, vol)
	})
	if sawBWhileA {
		t.Fatal("B had a VolumeAttachment while A's still existed")
	}
	if n := countEqual(s.podEvents("second"), multi); n != 1 {
		t.Fatalf("Multi-Attach events on the waiting pod = %d, want 1 per wait", n)
	}
}

// TestMultiAttachEventHidesOtherNamespaces: a pod must not learn the names of
// pods in other namespaces.
func TestMultiAttachEventHidesOtherNamespaces(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	a, b := s.nodes[0], s.nodes[1]
	vol := s.createVolume("data", volumeOptions{})
	s.createPod("owner", a, vol.claim)
	s.waitAttached(vol, a)

	// A pod in another namespace cannot use the claim, but an inline in-tree volume
	// could name the same disk; here a second claim in another namespace is bound to
	// a second PV with the same handle, which is the same volume.
	other := "o-" + s.ns
	_, err := s.client.CoreV1().Namespaces().Create(s.ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}, metav1.CreateOptions{})
	s.must(err)
	t.Cleanup(func() {
		_ = s.client.CoreV1().Pods(other).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	s2 := *s
	s2.ns = other
	vol2 := s2.createVolume("data", volumeOptions{handle: vol.handle})
	s2.createPod("intruder", b, vol2.claim)
	s2.waitEvent("intruder", `Warning FailedAttachVolume Multi-Attach error for volume "`+vol2.pv+`" Volume is already used by 1 pod(s) in different namespaces`)
	s.must(s.client.CoreV1().Pods(other).Delete(s.ctx, "intruder", metav1.DeleteOptions{}))
	s2.eventually("the intruder pod gone", func() bool {
		_, err := s.client.CoreV1().Pods(other).Get(context.Background(), "intruder", metav1.GetOptions{})
		return err != nil
	})
}

// TestRWXVolumeOnTwoNodes attaches a ReadWriteMany volume to two nodes at once.
func TestRWXVolumeOnTwoNodes(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	vol := s.createVolume("shared", volumeOptions{modes: []v1.PersistentVolumeAccessMode{v1.ReadWriteMany}})
	s.createPod("one", s.nodes[0], vol.claim)
	s.createPod("two", s.nodes[1], vol.claim)
	s.waitAttached(vol, s.nodes[0])
	s.waitAttached(vol, s.nodes[1])
	for _, e := range s.podEvents("two") {
		if e != `Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "`+vol.pv+`"` {
			t.Fatalf("unexpected event on an RWX pod: %s", e)
		}
	}
}

// TestAttachErrorBecomesEvent: status.attachError is reported on the pod, and the
// attach is retried until the driver succeeds.
func TestAttachErrorBecomesEvent(t *testing.T) {
	s := newScenario(t, scenarioOptions{})
	vol := s.createVolume("flaky", volumeOptions{})
	s.attacher.FailAttach(vol.handle, "rpc error: code = Internal desc = disk is busy")
	s.createPod("app", s.nodes[0], vol.claim)
	s.waitEvent("app", `Warning FailedAttachVolume AttachVolume.Attach failed for volume "`+vol.pv+`" : rpc error: code = Internal desc = disk is busy`)
	s.attacher.ClearFailures(vol.handle)
	s.waitAttached(vol, s.nodes[0])
	s.waitEvent("app", `Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "`+vol.pv+`"`)
}
