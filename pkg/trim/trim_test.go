package trim

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/utils/ptr"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/populator"
)

const testDriver = "example.csi.k8s.io"

// fullMeta is an object's metadata with everything set; keptMeta is what trimming
// keeps of it where labels and annotations are not read.
func fullMeta(name, namespace string) metav1.ObjectMeta {
	m := keptMeta(name, namespace)
	m.Labels = map[string]string{"app": "db"}
	m.Annotations = map[string]string{"pv.kubernetes.io/provisioned-by": "example.csi.k8s.io", "big": "value"}
	m.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}}
	return m
}

// deletedAt is a fixed time, so that objects built apart compare equal.
var deletedAt = metav1.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)

func keptMeta(name, namespace string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: name, Namespace: namespace, UID: types.UID("uid-" + name), ResourceVersion: "42", DeletionTimestamp: &deletedAt,
		Finalizers:      []string{"external-attacher/example-csi-k8s-io"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "uid-p", Controller: ptr.To(true)}},
	}
}

// pvSpec is a PV's spec with everything a PV can carry besides its source.
func pvSpec(src v1.PersistentVolumeSource) v1.PersistentVolumeSpec {
	return v1.PersistentVolumeSpec{
		PersistentVolumeSource:        src,
		Capacity:                      v1.ResourceList{v1.ResourceStorage: resource.MustParse("10Gi")},
		AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		ClaimRef:                      &v1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: "ns", Name: "c", UID: "uid-c", ResourceVersion: "7"},
		PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimDelete,
		StorageClassName:              "fast",
		MountOptions:                  []string{"noatime"},
		VolumeMode:                    ptr.To(v1.PersistentVolumeFilesystem),
		NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelTopologyZone, Operator: v1.NodeSelectorOpIn, Values: []string{"zone-a"}}},
		}}}},
	}
}

// keptPVSpec is what trimming keeps of pvSpec for a source it trims: the source,
// the access modes (multi-attach) and the claim's namespace, name and UID (the
// binding, and the pods that reach the PV).
func keptPVSpec(src v1.PersistentVolumeSource) v1.PersistentVolumeSpec {
	return v1.PersistentVolumeSpec{
		PersistentVolumeSource: src,
		AccessModes:            []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		ClaimRef:               &v1.ObjectReference{Namespace: "ns", Name: "c", UID: "uid-c"},
	}
}

var pvStatus = v1.PersistentVolumeStatus{Phase: v1.VolumeBound, Message: "bound", LastPhaseTransitionTime: &deletedAt}

// TestTrimObjectKeepsOnlyWhatTheControllerReads: each PV, claim, VolumeAttachment
// and node, with every field set, trims to exactly the fields the populator, the
// reconciler's state, rebuild, shadow mode and the snapshot explanations read;
// a trimmed PV comes to the same volume and a trimmed node to the same register
// entry and force-detach rules as the full one.
func TestObjectKeepsOnlyWhatTheControllerReads(t *testing.T) {
	csi := &v1.CSIPersistentVolumeSource{
		Driver: testDriver, VolumeHandle: "vol-1", FSType: "ext4", ReadOnly: true,
		VolumeAttributes:           map[string]string{"storage.kubernetes.io/csiProvisionerIdentity": "1-2-3", "tier": "gold"},
		ControllerPublishSecretRef: &v1.SecretReference{Name: "s", Namespace: "ns"},
		NodeStageSecretRef:         &v1.SecretReference{Name: "s", Namespace: "ns"},
	}
	iscsi := &v1.ISCSIPersistentVolumeSource{TargetPortal: "10.0.0.1:3260", IQN: "iqn.2001-04.com.example:storage", Lun: 1, FSType: "ext4"}
	fc := &v1.FCVolumeSource{TargetWWNs: []string{"500a0981891b8dc5"}, Lun: ptr.To[int32](2)}
	gce := &v1.GCEPersistentDiskVolumeSource{PDName: "disk-1", FSType: "ext4"}
	nfs := &v1.NFSVolumeSource{Server: "nfs.example", Path: "/exports"}
	inline := pvSpec(v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "pd.csi.storage.gke.io", VolumeHandle: "projects/UNSPECIFIED/zones/zone-a/disks/disk-2"}})
	vaSpec := storagev1.VolumeAttachmentSpec{
		Attacher: testDriver, NodeName: "node-1",
		Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-1"), InlineVolumeSpec: &inline},
	}
	vaErrors := storagev1.VolumeAttachmentStatus{
		Attached:    true,
		AttachError: &storagev1.VolumeError{Time: deletedAt, Message: "attach failed", ErrorCode: ptr.To[int32](5)},
		DetachError: &storagev1.VolumeError{Time: deletedAt, Message: "detach failed"},
	}

	for _, tc := range []struct {
		name       string
		full, want runtime.Object
	}{
		{
			name: "CSI PV: driver and handle, access modes, claim",
			full: &v1.PersistentVolume{ObjectMeta: fullMeta("pv-1", ""), Spec: pvSpec(v1.PersistentVolumeSource{CSI: csi}), Status: pvStatus},
			want: &v1.PersistentVolume{ObjectMeta: keptMeta("pv-1", ""),
				Spec: keptPVSpec(v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: "vol-1"}})},
		},
		{
			name: "iSCSI PV: the whole source, which names the volume",
			full: &v1.PersistentVolume{ObjectMeta: fullMeta("pv-1", ""), Spec: pvSpec(v1.PersistentVolumeSource{ISCSI: iscsi}), Status: pvStatus},
			want: &v1.PersistentVolume{ObjectMeta: keptMeta("pv-1", ""), Spec: keptPVSpec(v1.PersistentVolumeSource{ISCSI: iscsi})},
		},
		{
			name: "Fibre Channel PV: the whole source, which names the volume",
			full: &v1.PersistentVolume{ObjectMeta: fullMeta("pv-1", ""), Spec: pvSpec(v1.PersistentVolumeSource{FC: fc}), Status: pvStatus},
			want: &v1.PersistentVolume{ObjectMeta: keptMeta("pv-1", ""), Spec: keptPVSpec(v1.PersistentVolumeSource{FC: fc})},
		},
		{
			name: "in-tree PV to translate: everything but status and managedFields",
			full: &v1.PersistentVolume{ObjectMeta: fullMeta("pv-1", ""), Spec: pvSpec(v1.PersistentVolumeSource{GCEPersistentDisk: gce}), Status: pvStatus},
			want: &v1.PersistentVolume{ObjectMeta: withLabelsAndAnnotations(keptMeta("pv-1", "")), Spec: pvSpec(v1.PersistentVolumeSource{GCEPersistentDisk: gce})},
		},
		{
			name: "PV that is never attached: everything but status and managedFields",
			full: &v1.PersistentVolume{ObjectMeta: fullMeta("pv-1", ""), Spec: pvSpec(v1.PersistentVolumeSource{NFS: nfs}), Status: pvStatus},
			want: &v1.PersistentVolume{ObjectMeta: withLabelsAndAnnotations(keptMeta("pv-1", "")), Spec: pvSpec(v1.PersistentVolumeSource{NFS: nfs})},
		},
		{
			name: "claim: bound volume, phase, owner references",
			full: &v1.PersistentVolumeClaim{
				ObjectMeta: fullMeta("c", "ns"),
				Spec: v1.PersistentVolumeClaimSpec{
					VolumeName: "pv-1", AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}, StorageClassName: ptr.To("fast"),
					Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("10Gi")}},
					Selector:  &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
				},
				Status: v1.PersistentVolumeClaimStatus{
					Phase: v1.ClaimBound, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
					Capacity:   v1.ResourceList{v1.ResourceStorage: resource.MustParse("10Gi")},
					Conditions: []v1.PersistentVolumeClaimCondition{{Type: v1.PersistentVolumeClaimResizing, Status: v1.ConditionTrue}},
				},
			},
			want: &v1.PersistentVolumeClaim{
				ObjectMeta: keptMeta("c", "ns"),
				Spec:       v1.PersistentVolumeClaimSpec{VolumeName: "pv-1"},
				Status:     v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound},
			},
		},
		{
			name: "VolumeAttachment: spec, finalizers, deletion, attached and errors",
			full: &storagev1.VolumeAttachment{
				ObjectMeta: fullMeta("csi-0123", ""), Spec: vaSpec,
				Status: storagev1.VolumeAttachmentStatus{
					Attached: true, AttachError: vaErrors.AttachError, DetachError: vaErrors.DetachError,
					AttachmentMetadata: map[string]string{"devicePath": "/dev/disk/by-id/virtio-vol-1"},
				},
			},
			want: &storagev1.VolumeAttachment{ObjectMeta: keptMeta("csi-0123", ""), Spec: vaSpec, Status: vaErrors},
		},
		{
			name: "node: managed annotation, taints, Ready, volumes attached and in use",
			full: fullNode(),
			want: &v1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "uid-node-1", ResourceVersion: "42",
					Annotations: map[string]string{cache.ManagedAnnotation: "true"}},
				Spec: v1.NodeSpec{Taints: fullNode().Spec.Taints},
				Status: v1.NodeStatus{
					Conditions:      []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionFalse}},
					VolumesAttached: fullNode().Status.VolumesAttached,
					VolumesInUse:    fullNode().Status.VolumesInUse,
				},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			full := tc.full.DeepCopyObject()
			got, err := Object(tc.full)
			if err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("trimmed object differs from what the controller reads (- got, + want):\n%s", diff.Diff(got, tc.want))
			}
			switch full := full.(type) {
			case *v1.PersistentVolume:
				sameVolume(t, full, got.(*v1.PersistentVolume))
			case *v1.Node:
				sameNode(t, full, got.(*v1.Node))
			}
		})
	}
}

func withLabelsAndAnnotations(m metav1.ObjectMeta) metav1.ObjectMeta {
	full := fullMeta(m.Name, m.Namespace)
	m.Labels, m.Annotations = full.Labels, full.Annotations
	return m
}

// sameVolume checks that the trimmed PV comes to the same volume as the full one.
func sameVolume(t *testing.T, full, trimmed *v1.PersistentVolume) {
	t.Helper()
	p := populator.New(populator.Listers{}, cache.NewDesiredState(), nil)
	wantVol, wantOK, wantErr := p.VolumeOfPV(full)
	gotVol, gotOK, gotErr := p.VolumeOfPV(trimmed)
	if !equality.Semantic.DeepEqual(gotVol, wantVol) || gotOK != wantOK || (gotErr == nil) != (wantErr == nil) {
		t.Errorf("trimmed PV is volume %+v, %v, %v; the full one %+v, %v, %v", gotVol, gotOK, gotErr, wantVol, wantOK, wantErr)
	}
}

// fullNode is a node as kubelet and a cloud provider leave it.
func fullNode() *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: "node-1", UID: "uid-node-1", ResourceVersion: "42",
			Labels: map[string]string{v1.LabelHostname: "node-1", v1.LabelTopologyZone: "zone-a", v1.LabelInstanceTypeStable: "n2-standard-8"},
			Annotations: map[string]string{
				cache.ManagedAnnotation:           "true",
				"csi.volume.kubernetes.io/nodeid": `{"example.csi.k8s.io":"node-1"}`,
				"node.alpha.kubernetes.io/ttl":    "0",
			},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}},
		},
		Spec: v1.NodeSpec{
			PodCIDR: "10.0.1.0/24", ProviderID: "gce://p/zone-a/node-1",
			Taints: []v1.Taint{
				{Key: cache.OutOfServiceTaint, Value: "nodeshutdown", Effect: v1.TaintEffectNoExecute},
				{Key: v1.TaintNodeNotReady, Effect: v1.TaintEffectNoSchedule},
			},
		},
		Status: v1.NodeStatus{
			Capacity:  v1.ResourceList{v1.ResourceCPU: resource.MustParse("8")},
			Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}},
			Conditions: []v1.NodeCondition{
				{Type: v1.NodeMemoryPressure, Status: v1.ConditionFalse, Reason: "KubeletHasSufficientMemory", LastHeartbeatTime: deletedAt},
				{Type: v1.NodeReady, Status: v1.ConditionFalse, Reason: "KubeletNotReady", Message: "container runtime is down", LastHeartbeatTime: deletedAt},
			},
			NodeInfo:        v1.NodeSystemInfo{KubeletVersion: "v1.37.1", OSImage: "Container-Optimized OS"},
			Images:          []v1.ContainerImage{{Names: []string{"registry.example/app:1"}, SizeBytes: 1 << 20}},
			VolumesAttached: []v1.AttachedVolume{{Name: "kubernetes.io/csi/example.csi.k8s.io^vol-1", DevicePath: ""}},
			VolumesInUse:    []v1.UniqueVolumeName{"kubernetes.io/csi/example.csi.k8s.io^vol-1"},
		},
	}
}

// sameNode checks that the trimmed node means the same to the node register and
// the force-detach rules as the full one.
func sameNode(t *testing.T, full, trimmed *v1.Node) {
	t.Helper()
	if got, want := cache.NodeFromObject(trimmed), cache.NodeFromObject(full); !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("trimmed node reads as %+v, the full one as %+v", got, want)
	}
	for _, rule := range []cache.ForceRule{cache.ForcedOutOfService, cache.ForcedOnTimeout, cache.ForcedOnShutdown} {
		if rule.Holds(trimmed) != rule.Holds(full) {
			t.Errorf("rule %s holds on the trimmed node: %v, on the full one: %v", rule, rule.Holds(trimmed), rule.Holds(full))
		}
	}
}

// TestObjectKeepsAPodsVolumesAndDropsItsBulk: a pod after trimming still needs the
// same volumes, and its bulky parts are gone, volumes that never need attaching
// included.
func TestObjectKeepsAPodsVolumesAndDropsItsBulk(t *testing.T) {
	now := metav1.Now()
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "p", Namespace: "ns", UID: "uid-p", DeletionTimestamp: &now,
			Annotations:     map[string]string{"big": "value"},
			Labels:          map[string]string{"app": "db"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "uid-db"}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		},
		Spec: v1.PodSpec{
			NodeName: "node-1",
			Volumes: []v1.Volume{
				{Name: "token", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{}}},
				{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}},
				{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}},
				{Name: "secret", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{}}},
				{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
				{Name: "inline", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: testDriver}}},
				{Name: "scratch-claim", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}},
				{Name: "info", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{}}},
				{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/var/log"}}},
			},
			Containers: []v1.Container{{Name: "app", Image: "registry.example/app", Env: []v1.EnvVar{{Name: "A", Value: "B"}}}},
		},
		Status: v1.PodStatus{
			Phase:             v1.PodRunning,
			Conditions:        []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}},
			ContainerStatuses: []v1.ContainerStatus{{Name: "app", Image: "registry.example/app", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}},
		},
	}
	obj, err := Object(pod)
	if err != nil {
		t.Fatal(err)
	}
	got := obj.(*v1.Pod)
	if got.Name != "p" || got.Namespace != "ns" || got.UID != "uid-p" || got.DeletionTimestamp == nil ||
		got.Spec.NodeName != "node-1" || len(got.Spec.Volumes) != 3 || got.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "c" ||
		got.Spec.Volumes[1].CSI == nil || got.Spec.Volumes[2].Ephemeral == nil ||
		got.Status.Phase != v1.PodRunning || len(got.Status.ContainerStatuses) != 1 || got.Status.ContainerStatuses[0].State.Running == nil {
		t.Errorf("trimmed pod lost what the controller reads: %+v", got)
	}
	if got.Annotations != nil || got.Labels != nil || got.OwnerReferences != nil || got.ManagedFields != nil || len(got.Spec.Containers) != 0 || got.Status.Conditions != nil ||
		got.Status.ContainerStatuses[0].Image != "" {
		t.Errorf("trimmed pod kept bulky parts: %+v", got)
	}
	node := &v1.Node{Status: v1.NodeStatus{Images: []v1.ContainerImage{{Names: []string{"img"}}}, VolumesInUse: []v1.UniqueVolumeName{"v"}}}
	obj, _ = Object(node)
	if n := obj.(*v1.Node); n.Status.Images != nil || len(n.Status.VolumesInUse) != 1 {
		t.Errorf("trimmed node = %+v, want images dropped and volumes kept", n.Status)
	}
}
