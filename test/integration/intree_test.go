package integration

import (
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

// TestInTreeISCSIAndFibreChannel: kubelet attaches in-tree iSCSI and Fibre
// Channel volumes itself, once node status lists them under its own names. The
// controller lists them (no VolumeAttachment), keeps a single-attach FC PV on one
// node, keeps a mounted one across a restart (node status is its only record) and
// takes them out of node status once their pods are gone and kubelet has unmounted
// them.
func TestInTreeISCSIAndFibreChannel(t *testing.T) {
	s := newScenario(t, scenarioOptions{SimOptions: suite.SimOptions{UnmountDelay: 300 * time.Millisecond}})
	a, b := s.Nodes[0], s.Nodes[1]
	fc := s.CreateVolume("fc", workload.VolumeOptions{InTree: &v1.PersistentVolumeSource{FC: &v1.FCVolumeSource{
		TargetWWNs: []string{"50060e801049cfd1", "50060e801049cfd2"}, Lun: ptr.To[int32](3),
	}}})
	const fcName = "kubernetes.io/fc/[50060e801049cfd1 50060e801049cfd2]:3"
	const iscsiName = "kubernetes.io/iscsi/10.0.0.1:3260:iqn.2001-04.com.example:storage.disk1:5"
	s.CreatePod("fc-user", a, fc.Claim)
	iscsiPod := s.Pod("iscsi-user", a)
	iscsiPod.Spec.Volumes = []v1.Volume{{Name: "lun", VolumeSource: v1.VolumeSource{ISCSI: &v1.ISCSIVolumeSource{
		TargetPortal: "10.0.0.1:3260", IQN: "iqn.2001-04.com.example:storage.disk1", Lun: 5,
	}}}}
	s.CreatePodObject(iscsiPod)

	attachedOn := func(node string) []v1.AttachedVolume {
		n, err := s.Client.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
		s.Must(err)
		return n.Status.VolumesAttached
	}
	both := []v1.AttachedVolume{{Name: fcName, DevicePath: ""}, {Name: iscsiName, DevicePath: ""}}
	sameEntries := func(got, want []v1.AttachedVolume) bool {
		return len(got) == len(want) && !slices.ContainsFunc(want, func(w v1.AttachedVolume) bool { return !slices.Contains(got, w) })
	}
	s.Eventually("both volumes in the volumesAttached of node A, by kubelet's names", func() bool { return sameEntries(attachedOn(a), both) })
	s.WaitEvent("fc-user", `Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "`+fc.PV+`" `)
	s.WaitEvent("iscsi-user", `Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "lun" `)
	s.Eventually("kubelet reports both in use", func() bool {
		_, fcInUse, err := s.Workload.InNodeStatus(t.Context(), a, fc)
		s.Must(err)
		return fcInUse
	})
	if vas, err := s.Client.StorageV1().VolumeAttachments().List(t.Context(), metav1.ListOptions{}); err != nil || len(vas.Items) != 0 {
		t.Fatalf("VolumeAttachments = %v (%v), want none for in-tree iSCSI and FC volumes", vas, err)
	}

	// The single-attach FC PV wanted on B waits for A.
	s.CreatePod("fc-second", b, fc.Claim)
	s.WaitEvent("fc-second", `Warning FailedAttachVolume Waiting for detach for volume "`+fc.PV+`" Volume is already used by pod(s) fc-user`)

	// Restart with the iSCSI volume's pod deleted meanwhile and the volume still
	// mounted: node status is its only record, and it must stay there until kubelet
	// has unmounted it.
	s.Must(s.Kubelet.SetStuck(a, iscsiName, true))
	s.killController()
	s.DeletePod("iscsi-user")
	time.Sleep(500 * time.Millisecond)
	s.startController()
	s.Never(2*time.Second, "node A losing a mounted in-tree volume, or node B gaining the FC volume, across the restart", func() bool {
		return !sameEntries(attachedOn(a), both) || s.InNodeStatus(b, fc)
	})
	s.Must(s.Kubelet.SetStuck(a, iscsiName, false))
	s.Eventually("the unmounted iSCSI volume gone from node A's status", func() bool {
		return sameEntries(attachedOn(a), []v1.AttachedVolume{{Name: fcName, DevicePath: ""}})
	})

	// The FC volume moves once its pod on A is gone.
	s.DeletePod("fc-user")
	s.Eventually("the FC volume listed on node B only", func() bool {
		return !s.InNodeStatus(a, fc) && s.InNodeStatus(b, fc)
	})
}
