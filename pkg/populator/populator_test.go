package populator_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/populator"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

const (
	driver = "example.csi.k8s.io"
	ns     = "app"
	node   = "node-1"
)

// world holds informer indexers filled by hand and a populator reading them.
type world struct {
	pods, claims, pvs, drivers toolscache.Indexer
	desired                    *cache.DesiredState
	changedMu                  sync.Mutex
	changed                    []volumename.UniqueName
	pop                        *populator.Populator
}

func newWorld(t *testing.T, objs ...any) *world {
	t.Helper()
	w := &world{
		pods: toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{
			toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc,
			populator.ClaimIndex:      populator.ClaimIndexFunc,
		}),
		claims:  toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc}),
		pvs:     toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{}),
		drivers: toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{}),
		desired: cache.NewDesiredState(),
	}
	w.pop = populator.New(populator.Listers{
		Pods:       corelisters.NewPodLister(w.pods),
		PodIndexer: w.pods,
		Claims:     corelisters.NewPersistentVolumeClaimLister(w.claims),
		PVs:        corelisters.NewPersistentVolumeLister(w.pvs),
		Drivers:    storagelisters.NewCSIDriverLister(w.drivers),
	}, w.desired, w)
	for _, obj := range objs {
		w.add(t, obj)
	}
	return w
}

// Enqueue records a volume whose desired state changed.
func (w *world) Enqueue(name volumename.UniqueName) {
	w.changedMu.Lock()
	defer w.changedMu.Unlock()
	w.changed = append(w.changed, name)
}

func (w *world) indexer(t *testing.T, obj any) toolscache.Indexer {
	t.Helper()
	switch obj.(type) {
	case *v1.Pod:
		return w.pods
	case *v1.PersistentVolumeClaim:
		return w.claims
	case *v1.PersistentVolume:
		return w.pvs
	case *storagev1.CSIDriver:
		return w.drivers
	}
	t.Fatalf("no indexer for %T", obj)
	return nil
}

func (w *world) add(t *testing.T, obj any) {
	t.Helper()
	if err := w.indexer(t, obj).Add(obj); err != nil {
		t.Fatal(err)
	}
}

func (w *world) remove(t *testing.T, obj any) {
	t.Helper()
	if err := w.indexer(t, obj).Delete(obj); err != nil {
		t.Fatal(err)
	}
}

// volumesOf returns the desired volumes of the pod, as the desired state holds them.
func (w *world) volumesOf(pod *v1.Pod) []cache.Volume {
	var out []cache.Volume
	for _, name := range w.desired.Volumes() {
		vol, _ := w.desired.Volume(name)
		for _, p := range vol.Nodes[pod.Spec.NodeName] {
			if p.Namespace == pod.Namespace && p.Name == pod.Name {
				out = append(out, vol.Spec)
			}
		}
	}
	return out
}

func runningPod(name string, vols ...v1.Volume) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec:       v1.PodSpec{NodeName: node, Volumes: vols},
		Status:     v1.PodStatus{Phase: v1.PodRunning},
	}
}

func claimVolume(volName, claim string) v1.Volume {
	return v1.Volume{Name: volName, VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
	}}
}

func ephemeralVolume(volName string) v1.Volume {
	return v1.Volume{Name: volName, VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}}
}

func boundClaim(name, pv string) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec:       v1.PersistentVolumeClaimSpec{VolumeName: pv},
		Status:     v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound},
	}
}

func ownedBy(claim *v1.PersistentVolumeClaim, pod *v1.Pod) *v1.PersistentVolumeClaim {
	controller := true
	claim.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: &controller,
	}}
	return claim
}

func csiPV(name, handle string, claim *v1.PersistentVolumeClaim, modes ...v1.PersistentVolumeAccessMode) *v1.PersistentVolume {
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{
			AccessModes: modes,
			PersistentVolumeSource: v1.PersistentVolumeSource{
				CSI: &v1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle},
			},
		},
	}
	if claim != nil {
		pv.Spec.ClaimRef = &v1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID}
	}
	return pv
}

func csiDriver(name string, attachRequired *bool) *storagev1.CSIDriver {
	return &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       storagev1.CSIDriverSpec{AttachRequired: attachRequired},
	}
}

func pvVolume(name, handle string, multi bool) cache.Volume {
	return cache.Volume{
		Name:        volumename.CSI(driver, handle),
		Driver:      driver,
		Handle:      handle,
		PVName:      name,
		DisplayName: name,
		MultiAttach: multi,
	}
}

func TestSyncPodVolumes(t *testing.T) {
	rwo := v1.ReadWriteOnce
	yes, no := true, false
	claim := boundClaim("data", "pv-1")
	pod := runningPod("web", claimVolume("data", "data"))
	deletedAt := metav1.Now()
	running := v1.ContainerStatus{Name: "c", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}
	terminated := v1.ContainerStatus{Name: "c", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{}}}
	waiting := v1.ContainerStatus{Name: "c", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{}}}
	withPod := func(mutate func(p *v1.Pod)) *v1.Pod {
		p := pod.DeepCopy()
		mutate(p)
		return p
	}
	rwoVolume := pvVolume("pv-1", "h-1", false)

	ephemeralPod := runningPod("job", ephemeralVolume("scratch"))
	strangerPod := runningPod("stranger")

	tests := []struct {
		name string
		pod  *v1.Pod
		objs []any
		want []cache.Volume
	}{
		{
			name: "claim bound to a CSI PV",
			pod:  pod,
			objs: []any{claim, csiPV("pv-1", "h-1", claim, rwo)},
			want: []cache.Volume{rwoVolume},
		},
		{
			name: "ReadWriteMany PV",
			pod:  pod,
			objs: []any{claim, csiPV("pv-1", "h-1", claim, v1.ReadWriteMany)},
			want: []cache.Volume{pvVolume("pv-1", "h-1", true)},
		},
		{
			name: "claim not bound",
			pod:  pod,
			objs: []any{
				&v1.PersistentVolumeClaim{ObjectMeta: claim.ObjectMeta, Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimPending}},
				csiPV("pv-1", "h-1", claim, rwo),
			},
		},
		{
			name: "claim bound without a volume name",
			pod:  pod,
			objs: []any{boundClaim("data", ""), csiPV("pv-1", "h-1", claim, rwo)},
		},
		{
			name: "claim missing",
			pod:  pod,
			objs: []any{csiPV("pv-1", "h-1", claim, rwo)},
		},
		{
			name: "PV missing",
			pod:  pod,
			objs: []any{claim},
		},
		{
			name: "PV claimRef names another claim uid",
			pod:  pod,
			objs: []any{claim, csiPV("pv-1", "h-1", &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data", UID: "old-uid"}}, rwo)},
		},
		{
			name: "PV without claimRef",
			pod:  pod,
			objs: []any{claim, csiPV("pv-1", "h-1", nil, rwo)},
		},
		{
			name: "generic ephemeral volume owned by the pod",
			pod:  ephemeralPod,
			objs: []any{ownedBy(boundClaim("job-scratch", "pv-e"), ephemeralPod), csiPV("pv-e", "h-e", boundClaim("job-scratch", ""), rwo)},
			want: []cache.Volume{pvVolume("pv-e", "h-e", false)},
		},
		{
			name: "generic ephemeral volume owned by another pod",
			pod:  ephemeralPod,
			objs: []any{ownedBy(boundClaim("job-scratch", "pv-e"), strangerPod), csiPV("pv-e", "h-e", boundClaim("job-scratch", ""), rwo)},
		},
		{
			name: "generic ephemeral volume with an unowned claim",
			pod:  ephemeralPod,
			objs: []any{boundClaim("job-scratch", "pv-e"), csiPV("pv-e", "h-e", boundClaim("job-scratch", ""), rwo)},
		},
		{
			name: "CSIDriver with attachRequired false",
			pod:  pod,
			objs: []any{claim, csiPV("pv-1", "h-1", claim, rwo), csiDriver(driver, &no)},
		},
		{
			name: "CSIDriver with attachRequired true",
			pod:  pod,
			objs: []any{claim, csiPV("pv-1", "h-1", claim, rwo), csiDriver(driver, &yes)},
			want: []cache.Volume{rwoVolume},
		},
		{
			name: "CSIDriver with attachRequired nil",
			pod:  pod,
			objs: []any{claim, csiPV("pv-1", "h-1", claim, rwo), csiDriver(driver, nil)},
			want: []cache.Volume{rwoVolume},
		},
		{
			name: "other driver's CSIDriver says attachRequired false",
			pod:  pod,
			objs: []any{claim, csiPV("pv-1", "h-1", claim, rwo), csiDriver("other.csi.k8s.io", &no)},
			want: []cache.Volume{rwoVolume},
		},
		{
			name: "pod without node",
			pod:  withPod(func(p *v1.Pod) { p.Spec.NodeName = "" }),
			objs: []any{claim, csiPV("pv-1", "h-1", claim, rwo)},
		},
		{
			name: "pod pending with node",
			pod:  withPod(func(p *v1.Pod) { p.Status.Phase = v1.PodPending }),
			objs: []any{claim, csiPV("pv-1", "h-1", claim, rwo)},
			want: []cache.Volume{rwoVolume},
		},
		{
			name: "pod succeeded",
			pod:  withPod(func(p *v1.Pod) { p.Status.Phase = v1.PodSucceeded }),
			objs: []any{claim, csiPV("pv-1", "h-1", claim, rwo)},
		},
		{
			name: "pod failed",
			pod:  withPod(func(p *v1.Pod) { p.Status.Phase = v1.PodFailed }),
			objs: []any{claim, csiPV("pv-1", "h-1", claim, rwo)},
		},
		{
			name: "pod deleted with every container terminated",
			pod: withPod(func(p *v1.Pod) {
				p.DeletionTimestamp = &deletedAt
				p.Status.ContainerStatuses = []v1.ContainerStatus{terminated}
			}),
			objs: []any{claim, csiPV("pv-1", "h-1", claim, rwo)},
		},
		{
			name: "pod deleted with a container waiting",
			pod: withPod(func(p *v1.Pod) {
				p.DeletionTimestamp = &deletedAt
				p.Status.ContainerStatuses = []v1.ContainerStatus{waiting}
			}),
			objs: []any{claim, csiPV("pv-1", "h-1", claim, rwo)},
		},
		{
			name: "pod deleted without container statuses",
			pod:  withPod(func(p *v1.Pod) { p.DeletionTimestamp = &deletedAt }),
			objs: []any{claim, csiPV("pv-1", "h-1", claim, rwo)},
		},
		{
			name: "pod deleted with a container still running",
			pod: withPod(func(p *v1.Pod) {
				p.DeletionTimestamp = &deletedAt
				p.Status.ContainerStatuses = []v1.ContainerStatus{terminated, running}
			}),
			objs: []any{claim, csiPV("pv-1", "h-1", claim, rwo)},
			want: []cache.Volume{rwoVolume},
		},
		{
			name: "pod deleted with an init container still running",
			pod: withPod(func(p *v1.Pod) {
				p.DeletionTimestamp = &deletedAt
				p.Status.InitContainerStatuses = []v1.ContainerStatus{running}
			}),
			objs: []any{claim, csiPV("pv-1", "h-1", claim, rwo)},
			want: []cache.Volume{rwoVolume},
		},
		{
			name: "pod deleted with an ephemeral container still running",
			pod: withPod(func(p *v1.Pod) {
				p.DeletionTimestamp = &deletedAt
				p.Status.EphemeralContainerStatuses = []v1.ContainerStatus{running}
			}),
			objs: []any{claim, csiPV("pv-1", "h-1", claim, rwo)},
			want: []cache.Volume{rwoVolume},
		},
		{
			name: "CSI inline ephemeral volume needs no attach",
			pod: runningPod("inline", v1.Volume{Name: "csi", VolumeSource: v1.VolumeSource{
				CSI: &v1.CSIVolumeSource{Driver: driver},
			}}),
		},
		{
			name: "non-attachable volumes",
			pod: runningPod("plain",
				v1.Volume{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}},
				v1.Volume{Name: "nfs", VolumeSource: v1.VolumeSource{NFS: &v1.NFSVolumeSource{Server: "s", Path: "/"}}},
				v1.Volume{Name: "tmp", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
			),
		},
		{
			name: "NFS PV needs no attach",
			pod:  pod,
			objs: []any{claim, &v1.PersistentVolume{
				ObjectMeta: metav1.ObjectMeta{Name: "pv-1"},
				Spec: v1.PersistentVolumeSpec{
					ClaimRef:               &v1.ObjectReference{Namespace: ns, Name: "data", UID: claim.UID},
					PersistentVolumeSource: v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: "s", Path: "/"}},
				},
			}},
		},
		{
			name: "two claims, one unbound",
			pod:  runningPod("web", claimVolume("data", "data"), claimVolume("logs", "logs")),
			objs: []any{
				claim, csiPV("pv-1", "h-1", claim, rwo),
				&v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "logs", UID: "uid-logs"}},
			},
			want: []cache.Volume{rwoVolume},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, append([]any{tc.pod}, tc.objs...)...)
			w.pop.SyncPod(context.Background(), tc.pod.Namespace+"/"+tc.pod.Name)
			got := w.volumesOf(tc.pod)
			if !slices.Equal(got, tc.want) {
				t.Errorf("desired volumes = %+v, want %+v", got, tc.want)
			}
			if n := len(w.desired.Volumes()); n != len(tc.want) {
				t.Errorf("desired state holds %d volumes, want %d", n, len(tc.want))
			}
		})
	}
}

func TestSyncPodInTreeVolumes(t *testing.T) {
	const (
		gceDriver = "pd.csi.storage.gke.io"
		ebsDriver = "ebs.csi.aws.com"
	)
	claim := boundClaim("data", "pv-gce")
	gcePV := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-gce", Labels: map[string]string{v1.LabelTopologyZone: "us-central1-a"}},
		Spec: v1.PersistentVolumeSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			ClaimRef:    &v1.ObjectReference{Namespace: ns, Name: "data", UID: claim.UID},
			PersistentVolumeSource: v1.PersistentVolumeSource{
				GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{PDName: "disk-1"},
			},
		},
	}
	ebsClaim := boundClaim("data", "pv-ebs")
	ebsPV := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-ebs"},
		Spec: v1.PersistentVolumeSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadOnlyMany},
			ClaimRef:    &v1.ObjectReference{Namespace: ns, Name: "data", UID: ebsClaim.UID},
			PersistentVolumeSource: v1.PersistentVolumeSource{
				AWSElasticBlockStore: &v1.AWSElasticBlockStoreVolumeSource{VolumeID: "aws://us-east-1a/vol-0123"},
			},
		},
	}
	inlineEBS := v1.Volume{Name: "disk", VolumeSource: v1.VolumeSource{
		AWSElasticBlockStore: &v1.AWSElasticBlockStoreVolumeSource{VolumeID: "vol-0456"},
	}}
	inlineGCE := v1.Volume{Name: "pd", VolumeSource: v1.VolumeSource{
		GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{PDName: "disk-2"},
	}}

	inline := func(name string, source v1.VolumeSource) *v1.Pod {
		return runningPod("web", v1.Volume{Name: name, VolumeSource: source})
	}
	const diskURI = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/disks/d2"

	tests := []struct {
		name       string
		pod        *v1.Pod
		objs       []any
		want       cache.Volume
		wantInline bool
	}{
		{
			name: "gcePersistentDisk PV",
			pod:  runningPod("web", claimVolume("data", "data")),
			objs: []any{claim, gcePV},
			want: cache.Volume{
				Name:   volumename.CSI(gceDriver, "projects/UNSPECIFIED/zones/us-central1-a/disks/disk-1"),
				Driver: gceDriver, Handle: "projects/UNSPECIFIED/zones/us-central1-a/disks/disk-1",
				PVName: "pv-gce", DisplayName: "pv-gce", Migrated: true,
			},
		},
		{
			name: "awsElasticBlockStore PV",
			pod:  runningPod("web", claimVolume("data", "data")),
			objs: []any{ebsClaim, ebsPV},
			want: cache.Volume{
				Name:   volumename.CSI(ebsDriver, "vol-0123"),
				Driver: ebsDriver, Handle: "vol-0123",
				PVName: "pv-ebs", DisplayName: "pv-ebs", MultiAttach: true, Migrated: true,
			},
		},
		{
			name:       "inline awsElasticBlockStore",
			pod:        runningPod("web", inlineEBS),
			want:       cache.Volume{Name: volumename.CSI(ebsDriver, "vol-0456"), Driver: ebsDriver, Handle: "vol-0456", DisplayName: ebsDriver + "-vol-0456", Migrated: true},
			wantInline: true,
		},
		{
			name: "inline gcePersistentDisk",
			pod:  runningPod("web", inlineGCE),
			want: cache.Volume{
				Name:   volumename.CSI(gceDriver, "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/disk-2"),
				Driver: gceDriver, Handle: "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/disk-2", DisplayName: gceDriver + "-disk-2", Migrated: true,
			},
			wantInline: true,
		},
		{
			name: "inline gcePersistentDisk, read-only: several nodes may have it",
			pod:  inline("pd", v1.VolumeSource{GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{PDName: "disk-3", ReadOnly: true}}),
			want: cache.Volume{
				Name:   volumename.CSI(gceDriver, "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/disk-3"),
				Driver: gceDriver, Handle: "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/disk-3", DisplayName: gceDriver + "-disk-3", MultiAttach: true, Migrated: true,
			},
			wantInline: true,
		},
		{
			name:       "inline azureDisk: named by its disk URI",
			pod:        inline("disk", v1.VolumeSource{AzureDisk: &v1.AzureDiskVolumeSource{DiskName: "d2", DataDiskURI: diskURI}}),
			want:       cache.Volume{Name: volumename.CSI("disk.csi.azure.com", diskURI), Driver: "disk.csi.azure.com", Handle: diskURI, DisplayName: diskURI, Migrated: true},
			wantInline: true,
		},
		{
			name:       "inline cinder",
			pod:        inline("disk", v1.VolumeSource{Cinder: &v1.CinderVolumeSource{VolumeID: "c-2"}}),
			want:       cache.Volume{Name: volumename.CSI("cinder.csi.openstack.org", "c-2"), Driver: "cinder.csi.openstack.org", Handle: "c-2", DisplayName: "cinder.csi.openstack.org-c-2", Migrated: true},
			wantInline: true,
		},
		{
			name: "inline vsphereVolume",
			pod:  inline("disk", v1.VolumeSource{VsphereVolume: &v1.VsphereVirtualDiskVolumeSource{VolumePath: "[ds1] kubevols/d2.vmdk"}}),
			want: cache.Volume{
				Name:   volumename.CSI("csi.vsphere.vmware.com", "[ds1] kubevols/d2.vmdk"),
				Driver: "csi.vsphere.vmware.com", Handle: "[ds1] kubevols/d2.vmdk", DisplayName: "csi.vsphere.vmware.com-[ds1] kubevols/d2.vmdk", Migrated: true,
			},
			wantInline: true,
		},
		{
			name:       "inline portworxVolume",
			pod:        inline("disk", v1.VolumeSource{PortworxVolume: &v1.PortworxVolumeSource{VolumeID: "px-2"}}),
			want:       cache.Volume{Name: volumename.CSI("pxd.portworx.com", "px-2"), Driver: "pxd.portworx.com", Handle: "px-2", DisplayName: "pxd.portworx.com-px-2", Migrated: true},
			wantInline: true,
		},
		{
			// The handle and name hold the pod's volume name and namespace; the
			// translation makes the share ReadWriteMany, so several nodes may
			// have it, as kube-controller-manager judges the translated spec.
			name: "inline azureFile: named by a volume ID with the pod's namespace",
			pod: inline("files", v1.VolumeSource{AzureFile: &v1.AzureFileVolumeSource{
				SecretName: "azure-storage-account-acct-secret", ShareName: "share",
			}}),
			want: cache.Volume{
				Name:   volumename.CSI("file.csi.azure.com", "#acct#share#files#"+ns),
				Driver: "file.csi.azure.com", Handle: "#acct#share#files#" + ns, DisplayName: "#acct#share#files#" + ns, MultiAttach: true, Migrated: true,
			},
			wantInline: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, append([]any{tc.pod}, tc.objs...)...)
			w.pop.SyncPod(context.Background(), tc.pod.Namespace+"/"+tc.pod.Name)
			got := w.volumesOf(tc.pod)
			if len(got) != 1 {
				t.Fatalf("desired volumes = %+v, want one", got)
			}
			inline := got[0].InlineSpec
			got[0].InlineSpec = nil
			if got[0] != tc.want {
				t.Errorf("desired volume = %+v, want %+v", got[0], tc.want)
			}
			if !tc.wantInline {
				if inline != nil {
					t.Errorf("InlineSpec = %+v for a PV, want nil", inline)
				}
				return
			}
			if inline == nil || inline.CSI == nil {
				t.Fatalf("InlineSpec = %+v, want a translated CSI spec", inline)
			}
			if inline.CSI.Driver != tc.want.Driver || inline.CSI.VolumeHandle != tc.want.Handle {
				t.Errorf("InlineSpec.CSI = %s %s, want %s %s", inline.CSI.Driver, inline.CSI.VolumeHandle, tc.want.Driver, tc.want.Handle)
			}
		})
	}
}

func TestSyncPodReportsChanges(t *testing.T) {
	claim := boundClaim("data", "pv-1")
	pv := csiPV("pv-1", "h-1", claim, v1.ReadWriteOnce)
	pod := runningPod("web", claimVolume("data", "data"))
	vol := volumename.CSI(driver, "h-1")
	w := newWorld(t, pod, claim)
	ctx := context.Background()

	w.pop.SyncPod(ctx, "app/web")
	if len(w.changed) != 0 || len(w.desired.Volumes()) != 0 {
		t.Fatalf("PV missing: changed %q, desired %q, want nothing", w.changed, w.desired.Volumes())
	}

	w.add(t, pv)
	if got := w.pop.PodsForPV(pv); !slices.Equal(got, []string{"app/web"}) {
		t.Errorf("PodsForPV() = %q, want [app/web]", got)
	}
	w.pop.SyncPod(ctx, "app/web")
	if !slices.Equal(w.changed, []volumename.UniqueName{vol}) || !w.desired.IsDesired(vol, node) {
		t.Errorf("PV added: changed %q, desired on node %v, want [%s] and true", w.changed, w.desired.IsDesired(vol, node), vol)
	}

	w.changed = nil
	w.pop.SyncPod(ctx, "app/web")
	if len(w.changed) != 0 {
		t.Errorf("nothing new: changed %q, want nothing", w.changed)
	}

	w.remove(t, pod)
	w.pop.SyncPod(ctx, "app/web")
	if !slices.Equal(w.changed, []volumename.UniqueName{vol}) || w.desired.IsDesired(vol, node) {
		t.Errorf("pod deleted: changed %q, desired on node %v, want [%s] and false", w.changed, w.desired.IsDesired(vol, node), vol)
	}
}

func TestFullPassForgetsVanishedPods(t *testing.T) {
	claim := boundClaim("data", "pv-1")
	pod := runningPod("web", claimVolume("data", "data"))
	w := newWorld(t, pod, claim, csiPV("pv-1", "h-1", claim, v1.ReadWriteOnce))
	ctx := context.Background()
	fullPass := func() {
		t.Helper()
		keys, err := w.pop.AllPods()
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range keys {
			w.pop.Enqueue(key)
		}
		w.pop.Drain(ctx, 1, nothingMore())
	}
	fullPass()
	if len(w.desired.PodKeys()) != 1 {
		t.Fatalf("PodKeys() = %q after a full pass, want the pod", w.desired.PodKeys())
	}
	w.remove(t, pod)
	fullPass()
	if keys := w.desired.PodKeys(); len(keys) != 0 {
		t.Errorf("PodKeys() = %q after the pod vanished, want none", keys)
	}
}

// A pod queued by several handlers at once is evaluated once, from the latest
// informer copy.
func TestQueuedPodIsEvaluatedOnce(t *testing.T) {
	claim := boundClaim("data", "pv-1")
	pod := runningPod("web", claimVolume("data", "data"))
	w := newWorld(t, pod, claim, csiPV("pv-1", "h-1", claim, v1.ReadWriteOnce))
	for range 3 {
		w.pop.Enqueue("app/web")
	}
	w.pop.Drain(context.Background(), 1, nothingMore())
	if len(w.changed) != 1 {
		t.Errorf("changed %q, want one report from one evaluation", w.changed)
	}
}

func TestPodsForClaim(t *testing.T) {
	web := runningPod("web", claimVolume("data", "shared"))
	api := runningPod("api", claimVolume("d", "shared"), claimVolume("x", "other"))
	job := runningPod("job", ephemeralVolume("scratch"))
	elsewhere := runningPod("web", claimVolume("data", "shared"))
	elsewhere.Namespace = "other-ns"
	w := newWorld(t, web, api, job, elsewhere)
	tests := []struct {
		namespace, claim string
		want             []string
	}{
		{ns, "shared", []string{"app/api", "app/web"}},
		{ns, "other", []string{"app/api"}},
		{ns, "job-scratch", []string{"app/job"}},
		{"other-ns", "shared", []string{"other-ns/web"}},
		{ns, "unused", []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.namespace+"/"+tc.claim, func(t *testing.T) {
			if got := w.pop.PodsForClaim(tc.namespace, tc.claim); !slices.Equal(got, tc.want) {
				t.Errorf("PodsForClaim() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPodsForPV(t *testing.T) {
	claim := boundClaim("data", "pv-1")
	w := newWorld(t, runningPod("web", claimVolume("data", "data")))
	tests := []struct {
		name string
		pv   *v1.PersistentVolume
		want []string
	}{
		{"claimed", csiPV("pv-1", "h-1", claim), []string{"app/web"}},
		{"no claimRef", csiPV("pv-1", "h-1", nil), nil},
		{"claim of no pod", csiPV("pv-2", "h-2", boundClaim("unused", "pv-2")), []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := w.pop.PodsForPV(tc.pv); !slices.Equal(got, tc.want) {
				t.Errorf("PodsForPV() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPodsForDriver(t *testing.T) {
	no := false
	claim := boundClaim("data", "pv-1")
	pod := runningPod("web", claimVolume("data", "data"))
	w := newWorld(t, pod, claim, csiPV("pv-1", "h-1", claim, v1.ReadWriteOnce), csiDriver(driver, &no))
	ctx := context.Background()
	w.pop.SyncPod(ctx, "app/web")
	if len(w.desired.Volumes()) != 0 {
		t.Errorf("desired volumes = %q with attachRequired false, want none", w.desired.Volumes())
	}
	if got := w.pop.PodsForDriver(driver); !slices.Equal(got, []string{"app/web"}) {
		t.Errorf("PodsForDriver() = %q, want [app/web] even though the driver needs no attach", got)
	}

	w.remove(t, csiDriver(driver, &no))
	w.pop.SyncPod(ctx, "app/web")
	if !w.desired.IsDesired(volumename.CSI(driver, "h-1"), node) {
		t.Error("volume not desired once the CSIDriver object is gone")
	}

	w.remove(t, pod)
	w.pop.SyncPod(ctx, "app/web")
	if got := w.pop.PodsForDriver(driver); len(got) != 0 {
		t.Errorf("PodsForDriver() = %q after the pod is gone, want none", got)
	}
}

func TestVolumeOfInlineSpec(t *testing.T) {
	tests := []struct {
		name   string
		spec   *v1.PersistentVolumeSpec
		want   cache.Volume
		wantOK bool
	}{
		{name: "nil", spec: nil},
		{name: "not CSI", spec: &v1.PersistentVolumeSpec{}},
		{
			name: "CSI",
			spec: &v1.PersistentVolumeSpec{
				AccessModes:            []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
				PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "h"}},
			},
			want:   cache.Volume{Name: volumename.CSI(driver, "h"), Driver: driver, Handle: "h", Migrated: true},
			wantOK: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := populator.VolumeOfInlineSpec(tc.spec)
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tc.wantOK)
			}
			if !ok {
				return
			}
			if got.InlineSpec != tc.spec {
				t.Errorf("InlineSpec = %p, want the spec given %p", got.InlineSpec, tc.spec)
			}
			got.InlineSpec = nil
			if got != tc.want {
				t.Errorf("VolumeOfInlineSpec() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestSyncPodEveryMigratableInTreePV(t *testing.T) {
	tests := []struct {
		name       string
		source     v1.PersistentVolumeSource
		wantDriver string
		wantHandle string
	}{
		{
			name:       "awsElasticBlockStore",
			source:     v1.PersistentVolumeSource{AWSElasticBlockStore: &v1.AWSElasticBlockStoreVolumeSource{VolumeID: "vol-0123"}},
			wantDriver: "ebs.csi.aws.com", wantHandle: "vol-0123",
		},
		{
			name:       "gcePersistentDisk",
			source:     v1.PersistentVolumeSource{GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{PDName: "disk-1"}},
			wantDriver: "pd.csi.storage.gke.io", wantHandle: "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/disk-1",
		},
		{
			name: "azureDisk",
			source: v1.PersistentVolumeSource{AzureDisk: &v1.AzureDiskVolumeSource{
				DiskName: "d1", DataDiskURI: "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/disks/d1",
			}},
			wantDriver: "disk.csi.azure.com", wantHandle: "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/disks/d1",
		},
		{
			name:       "cinder",
			source:     v1.PersistentVolumeSource{Cinder: &v1.CinderPersistentVolumeSource{VolumeID: "c-1"}},
			wantDriver: "cinder.csi.openstack.org", wantHandle: "c-1",
		},
		{
			name:       "vsphereVolume",
			source:     v1.PersistentVolumeSource{VsphereVolume: &v1.VsphereVirtualDiskVolumeSource{VolumePath: "[ds1] kubevols/disk.vmdk"}},
			wantDriver: "csi.vsphere.vmware.com", wantHandle: "[ds1] kubevols/disk.vmdk",
		},
		{
			name:       "portworxVolume",
			source:     v1.PersistentVolumeSource{PortworxVolume: &v1.PortworxVolumeSource{VolumeID: "px-1"}},
			wantDriver: "pxd.portworx.com", wantHandle: "px-1",
		},
		{
			name: "azureFile",
			source: v1.PersistentVolumeSource{AzureFile: &v1.AzureFilePersistentVolumeSource{
				SecretName: "azure-storage-account-acct-secret", ShareName: "share",
			}},
			wantDriver: "file.csi.azure.com", wantHandle: "#acct#share#pv-1#app",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			claim := boundClaim("data", "pv-1")
			pv := &v1.PersistentVolume{
				ObjectMeta: metav1.ObjectMeta{Name: "pv-1"},
				Spec: v1.PersistentVolumeSpec{
					AccessModes:            []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
					ClaimRef:               &v1.ObjectReference{Namespace: ns, Name: "data", UID: claim.UID},
					PersistentVolumeSource: tc.source,
				},
			}
			pod := runningPod("web", claimVolume("data", "data"))
			w := newWorld(t, pod, claim, pv)
			w.pop.SyncPod(context.Background(), "app/web")
			want := []cache.Volume{{
				Name: volumename.CSI(tc.wantDriver, tc.wantHandle), Driver: tc.wantDriver, Handle: tc.wantHandle,
				PVName: "pv-1", DisplayName: "pv-1", Migrated: true,
			}}
			if got := w.volumesOf(pod); !slices.Equal(got, want) {
				t.Errorf("desired volumes = %+v, want %+v", got, want)
			}
			if pv.Spec.CSI != nil {
				t.Error("translation changed the informer's PersistentVolume")
			}
		})
	}
}

func TestSyncPodISCSIAndFibreChannel(t *testing.T) {
	lun := int32(2)
	pvOf := func(name string, claim *v1.PersistentVolumeClaim, src v1.PersistentVolumeSource, modes ...v1.PersistentVolumeAccessMode) *v1.PersistentVolume {
		return &v1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1.PersistentVolumeSpec{
				AccessModes:            modes,
				ClaimRef:               &v1.ObjectReference{Namespace: ns, Name: claim.Name, UID: claim.UID},
				PersistentVolumeSource: src,
			},
		}
	}
	iscsiClaim := boundClaim("data", "pv-iscsi")
	fcClaim := boundClaim("data", "pv-fc")
	tests := []struct {
		name    string
		pod     *v1.Pod
		objs    []any
		want    []cache.Volume
		wantErr bool
	}{
		{
			name: "inline iSCSI",
			pod: runningPod("web", v1.Volume{Name: "lun", VolumeSource: v1.VolumeSource{ISCSI: &v1.ISCSIVolumeSource{
				TargetPortal: "10.0.0.1:3260", IQN: "iqn.2001-04.com.example:storage.disk1", Lun: 0,
			}}}),
			want: []cache.Volume{{
				Name: "kubernetes.io/iscsi/10.0.0.1:3260:iqn.2001-04.com.example:storage.disk1:0", DisplayName: "lun", MultiAttach: true,
			}},
		},
		{
			name: "inline Fibre Channel with WWIDs",
			pod: runningPod("web", v1.Volume{Name: "san", VolumeSource: v1.VolumeSource{FC: &v1.FCVolumeSource{
				WWIDs: []string{"3600508b400105e21", "3600508b400105e22"},
			}}}),
			want: []cache.Volume{{
				Name: "kubernetes.io/fc/[3600508b400105e21 3600508b400105e22]", DisplayName: "san", MultiAttach: true,
			}},
		},
		{
			name:    "inline Fibre Channel with neither WWNs and LUN nor WWIDs",
			pod:     runningPod("web", v1.Volume{Name: "san", VolumeSource: v1.VolumeSource{FC: &v1.FCVolumeSource{TargetWWNs: []string{"50060e801049cfd1"}}}}),
			wantErr: true,
		},
		{
			name: "iSCSI PV, ReadWriteOnce",
			pod:  runningPod("web", claimVolume("data", "data")),
			objs: []any{iscsiClaim, pvOf("pv-iscsi", iscsiClaim, v1.PersistentVolumeSource{ISCSI: &v1.ISCSIPersistentVolumeSource{
				TargetPortal: "10.0.0.2:3260", IQN: "iqn.2001-04.com.example:storage.disk2", Lun: 7,
			}}, v1.ReadWriteOnce)},
			want: []cache.Volume{{
				Name: "kubernetes.io/iscsi/10.0.0.2:3260:iqn.2001-04.com.example:storage.disk2:7", PVName: "pv-iscsi", DisplayName: "pv-iscsi",
			}},
		},
		{
			name: "Fibre Channel PV with target WWNs, ReadWriteMany",
			pod:  runningPod("web", claimVolume("data", "data")),
			objs: []any{fcClaim, pvOf("pv-fc", fcClaim, v1.PersistentVolumeSource{FC: &v1.FCVolumeSource{
				TargetWWNs: []string{"50060e801049cfd1", "50060e801049cfd2"}, Lun: &lun,
			}}, v1.ReadWriteMany)},
			want: []cache.Volume{{
				Name: "kubernetes.io/fc/[50060e801049cfd1 50060e801049cfd2]:2", PVName: "pv-fc", DisplayName: "pv-fc", MultiAttach: true,
			}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, append([]any{tc.pod}, tc.objs...)...)
			w.pop.SyncPod(context.Background(), tc.pod.Namespace+"/"+tc.pod.Name)
			got := w.volumesOf(tc.pod)
			if tc.wantErr {
				if len(got) != 0 {
					t.Errorf("desired volumes = %+v, want none: the source has no name", got)
				}
				return
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("desired volumes = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestDrainEvaluatesEveryQueuedPodOnItsWorkers: at start-up the pods are
// evaluated on several workers, and Drain returns once every one queued is in
// the desired state.
func TestDrainEvaluatesEveryQueuedPodOnItsWorkers(t *testing.T) {
	w := newWorld(t, podsWithVolumes(200)...)
	for i := range 200 {
		w.pop.Enqueue(fmt.Sprintf("%s/web-%d", ns, i))
	}
	w.pop.Drain(context.Background(), 8, nothingMore())
	if got := len(w.desired.PodKeys()); got != 200 {
		t.Errorf("%d pods in the desired state after Drain, want 200", got)
	}
	if got := len(w.changed); got != 200 {
		t.Errorf("%d volumes reported changed, want 200", got)
	}
}

// TestDrainEvaluatesPodsQueuedWhileItRuns: at start-up the event handlers still
// queue pods while Drain evaluates; it returns only once they say they are done
// and every pod queued is evaluated.
func TestDrainEvaluatesPodsQueuedWhileItRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, podsWithVolumes(20)...)
		defer w.pop.ShutDown()
		more := make(chan struct{})
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			w.pop.Drain(context.Background(), 2, more)
		}()
		enqueue := func(from, to int) {
			for i := from; i < to; i++ {
				w.pop.Enqueue(fmt.Sprintf("%s/web-%d", ns, i))
			}
		}
		enqueue(0, 10)
		time.Sleep(time.Second)
		synctest.Wait()
		if got := len(w.desired.PodKeys()); got != 10 {
			t.Errorf("%d pods evaluated while the handlers still deliver, want 10", got)
		}
		select {
		case <-drained:
			t.Fatal("Drain returned before the handlers were done")
		default:
		}
		enqueue(10, 20)
		close(more)
		<-drained
		if got := len(w.desired.PodKeys()); got != 20 {
			t.Errorf("%d pods in the desired state after Drain, want 20", got)
		}
	})
}

// podsWithVolumes returns n running pods web-0... each with a claim data-i bound
// to a CSI PersistentVolume of its own.
func podsWithVolumes(n int) []any {
	var objs []any
	for i := range n {
		claim := boundClaim(fmt.Sprintf("data-%d", i), fmt.Sprintf("pv-%d", i))
		objs = append(objs, claim, csiPV(fmt.Sprintf("pv-%d", i), fmt.Sprintf("h-%d", i), claim, v1.ReadWriteOnce),
			runningPod(fmt.Sprintf("web-%d", i), claimVolume("data", claim.Name)))
	}
	return objs
}

// nothingMore is Drain's more for a queue that gets no more pods.
func nothingMore() <-chan struct{} {
	more := make(chan struct{})
	close(more)
	return more
}
