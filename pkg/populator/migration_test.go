package populator_test

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	csitranslation "k8s.io/csi-translation-lib"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/populator"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// Access modes, short, for the tables below.
var (
	rwo = v1.ReadWriteOnce
	rox = v1.ReadOnlyMany
	rwx = v1.ReadWriteMany
)

// migrated is what kube-controller-manager v1.37.1 makes of an in-tree volume once
// csi-translation-lib v0.37.1 has translated it: every rule reads the translated
// spec.
type migrated struct {
	driver, handle string
	// modes are the translated spec's access modes.
	modes []v1.PersistentVolumeAccessMode
	// multiAttach is IsMultiAttachAllowed on the translated spec: ReadWriteMany
	// or ReadOnlyMany among the translated modes, or none listed.
	multiAttach bool
}

const (
	gcePD      = "pd.csi.storage.gke.io"
	awsEBS     = "ebs.csi.aws.com"
	azureDisk  = "disk.csi.azure.com"
	azureFile  = "file.csi.azure.com"
	cinder     = "cinder.csi.openstack.org"
	vsphere    = "csi.vsphere.vmware.com"
	portworx   = "pxd.portworx.com"
	gceHandle  = "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/disk-1"
	diskURI    = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/disks/d1"
	vmdk       = "[ds1] kubevols/disk.vmdk"
	fileSecret = "azure-storage-account-acct-secret"
)

func TestMigratedPVIsJudgedOnTheTranslatedSpec(t *testing.T) {
	tests := []struct {
		name          string
		source        v1.PersistentVolumeSource
		modes         []v1.PersistentVolumeAccessMode
		claimReadOnly bool
		want          migrated
	}{
		{
			name:   "gcePersistentDisk ReadWriteMany becomes ReadWriteOnce: one node",
			source: v1.PersistentVolumeSource{GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{PDName: "disk-1"}},
			modes:  []v1.PersistentVolumeAccessMode{rwx},
			want:   migrated{driver: gcePD, handle: gceHandle, modes: []v1.PersistentVolumeAccessMode{rwo}},
		},
		{
			name:   "gcePersistentDisk ReadWriteOnce and ReadOnlyMany becomes ReadWriteOnce: one node",
			source: v1.PersistentVolumeSource{GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{PDName: "disk-1"}},
			modes:  []v1.PersistentVolumeAccessMode{rwo, rox},
			want:   migrated{driver: gcePD, handle: gceHandle, modes: []v1.PersistentVolumeAccessMode{rwo}},
		},
		{
			name:   "gcePersistentDisk ReadWriteMany and ReadOnlyMany becomes ReadWriteOnce: one node",
			source: v1.PersistentVolumeSource{GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{PDName: "disk-1"}},
			modes:  []v1.PersistentVolumeAccessMode{rwx, rox},
			want:   migrated{driver: gcePD, handle: gceHandle, modes: []v1.PersistentVolumeAccessMode{rwo}},
		},
		{
			name:          "gcePersistentDisk ReadWriteMany through a read-only claim: one node all the same",
			source:        v1.PersistentVolumeSource{GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{PDName: "disk-1"}},
			modes:         []v1.PersistentVolumeAccessMode{rwx},
			claimReadOnly: true,
			want:          migrated{driver: gcePD, handle: gceHandle, modes: []v1.PersistentVolumeAccessMode{rwo}},
		},
		{
			name:   "gcePersistentDisk read-only ReadWriteOnce stays ReadWriteOnce: one node",
			source: v1.PersistentVolumeSource{GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{PDName: "disk-1", ReadOnly: true}},
			modes:  []v1.PersistentVolumeAccessMode{rwo},
			want:   migrated{driver: gcePD, handle: gceHandle, modes: []v1.PersistentVolumeAccessMode{rwo}},
		},
		{
			name:   "gcePersistentDisk ReadOnlyMany stays ReadOnlyMany: several nodes",
			source: v1.PersistentVolumeSource{GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{PDName: "disk-1"}},
			modes:  []v1.PersistentVolumeAccessMode{rox},
			want:   migrated{driver: gcePD, handle: gceHandle, modes: []v1.PersistentVolumeAccessMode{rox}, multiAttach: true},
		},
		{
			name:   "gcePersistentDisk with no access modes keeps none: not checked",
			source: v1.PersistentVolumeSource{GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{PDName: "disk-1"}},
			want:   migrated{driver: gcePD, handle: gceHandle, multiAttach: true},
		},
		{
			name:   "awsElasticBlockStore keeps ReadWriteOnce: one node",
			source: v1.PersistentVolumeSource{AWSElasticBlockStore: &v1.AWSElasticBlockStoreVolumeSource{VolumeID: "vol-1"}},
			modes:  []v1.PersistentVolumeAccessMode{rwo},
			want:   migrated{driver: awsEBS, handle: "vol-1", modes: []v1.PersistentVolumeAccessMode{rwo}},
		},
		{
			name:   "awsElasticBlockStore keeps ReadWriteMany: several nodes",
			source: v1.PersistentVolumeSource{AWSElasticBlockStore: &v1.AWSElasticBlockStoreVolumeSource{VolumeID: "vol-1"}},
			modes:  []v1.PersistentVolumeAccessMode{rwx},
			want:   migrated{driver: awsEBS, handle: "vol-1", modes: []v1.PersistentVolumeAccessMode{rwx}, multiAttach: true},
		},
		{
			name:   "azureDisk keeps ReadWriteOnce: one node",
			source: v1.PersistentVolumeSource{AzureDisk: &v1.AzureDiskVolumeSource{DiskName: "d1", DataDiskURI: diskURI}},
			modes:  []v1.PersistentVolumeAccessMode{rwo},
			want:   migrated{driver: azureDisk, handle: diskURI, modes: []v1.PersistentVolumeAccessMode{rwo}},
		},
		{
			name:   "azureDisk keeps ReadOnlyMany: several nodes",
			source: v1.PersistentVolumeSource{AzureDisk: &v1.AzureDiskVolumeSource{DiskName: "d1", DataDiskURI: diskURI}},
			modes:  []v1.PersistentVolumeAccessMode{rox},
			want:   migrated{driver: azureDisk, handle: diskURI, modes: []v1.PersistentVolumeAccessMode{rox}, multiAttach: true},
		},
		{
			name:   "azureFile keeps ReadWriteOnce in a PV: one node",
			source: v1.PersistentVolumeSource{AzureFile: &v1.AzureFilePersistentVolumeSource{SecretName: fileSecret, ShareName: "share"}},
			modes:  []v1.PersistentVolumeAccessMode{rwo},
			want:   migrated{driver: azureFile, handle: "#acct#share#pv-1#" + ns, modes: []v1.PersistentVolumeAccessMode{rwo}},
		},
		{
			name:   "azureFile keeps ReadWriteMany: several nodes",
			source: v1.PersistentVolumeSource{AzureFile: &v1.AzureFilePersistentVolumeSource{SecretName: fileSecret, ShareName: "share"}},
			modes:  []v1.PersistentVolumeAccessMode{rwx},
			want:   migrated{driver: azureFile, handle: "#acct#share#pv-1#" + ns, modes: []v1.PersistentVolumeAccessMode{rwx}, multiAttach: true},
		},
		{
			name:   "cinder keeps ReadWriteOnce: one node",
			source: v1.PersistentVolumeSource{Cinder: &v1.CinderPersistentVolumeSource{VolumeID: "c-1"}},
			modes:  []v1.PersistentVolumeAccessMode{rwo},
			want:   migrated{driver: cinder, handle: "c-1", modes: []v1.PersistentVolumeAccessMode{rwo}},
		},
		{
			name:   "cinder keeps ReadWriteMany: several nodes",
			source: v1.PersistentVolumeSource{Cinder: &v1.CinderPersistentVolumeSource{VolumeID: "c-1"}},
			modes:  []v1.PersistentVolumeAccessMode{rwx},
			want:   migrated{driver: cinder, handle: "c-1", modes: []v1.PersistentVolumeAccessMode{rwx}, multiAttach: true},
		},
		{
			name:   "vsphereVolume keeps ReadWriteOnce: one node",
			source: v1.PersistentVolumeSource{VsphereVolume: &v1.VsphereVirtualDiskVolumeSource{VolumePath: vmdk}},
			modes:  []v1.PersistentVolumeAccessMode{rwo},
			want:   migrated{driver: vsphere, handle: vmdk, modes: []v1.PersistentVolumeAccessMode{rwo}},
		},
		{
			name:   "vsphereVolume keeps ReadOnlyMany: several nodes",
			source: v1.PersistentVolumeSource{VsphereVolume: &v1.VsphereVirtualDiskVolumeSource{VolumePath: vmdk}},
			modes:  []v1.PersistentVolumeAccessMode{rox},
			want:   migrated{driver: vsphere, handle: vmdk, modes: []v1.PersistentVolumeAccessMode{rox}, multiAttach: true},
		},
		{
			name:   "portworxVolume keeps ReadWriteOnce, read-only or not: one node",
			source: v1.PersistentVolumeSource{PortworxVolume: &v1.PortworxVolumeSource{VolumeID: "px-1", ReadOnly: true}},
			modes:  []v1.PersistentVolumeAccessMode{rwo},
			want:   migrated{driver: portworx, handle: "px-1", modes: []v1.PersistentVolumeAccessMode{rwo}},
		},
		{
			name:   "portworxVolume keeps ReadWriteMany: several nodes",
			source: v1.PersistentVolumeSource{PortworxVolume: &v1.PortworxVolumeSource{VolumeID: "px-1"}},
			modes:  []v1.PersistentVolumeAccessMode{rwx},
			want:   migrated{driver: portworx, handle: "px-1", modes: []v1.PersistentVolumeAccessMode{rwx}, multiAttach: true},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			claim := boundClaim("data", "pv-1")
			pv := &v1.PersistentVolume{
				ObjectMeta: metav1.ObjectMeta{Name: "pv-1"},
				Spec: v1.PersistentVolumeSpec{
					AccessModes:            tc.modes,
					ClaimRef:               &v1.ObjectReference{Namespace: ns, Name: "data", UID: claim.UID},
					PersistentVolumeSource: tc.source,
				},
			}
			// The row's translated modes are csi-translation-lib's, not a guess.
			translated, err := csitranslation.New().TranslateInTreePVToCSI(klog.Background(), pv)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(translated.Spec.AccessModes, tc.want.modes) {
				t.Fatalf("csi-translation-lib translates %v to %v, the row says %v", tc.modes, translated.Spec.AccessModes, tc.want.modes)
			}

			podVol := claimVolume("data", "data")
			podVol.PersistentVolumeClaim.ReadOnly = tc.claimReadOnly
			pod := runningPod("web", podVol)
			w := newWorld(t, pod, claim, pv)
			if err := w.pop.SyncPod(context.Background(), "app/web"); err != nil {
				t.Fatal(err)
			}
			want := cache.Volume{
				Name:   volumename.CSI(tc.want.driver, tc.want.handle),
				Driver: tc.want.driver, Handle: tc.want.handle,
				PVName: "pv-1", DisplayName: "pv-1", MultiAttach: tc.want.multiAttach, Migrated: true,
			}
			if got := w.volumesOf(pod); !slices.Equal(got, []cache.Volume{want}) {
				t.Errorf("desired volumes = %+v, want %+v", got, want)
			}
			// A VolumeAttachment names the PV; the volume it is matched to is
			// judged the same way.
			got, ok, err := w.pop.VolumeOfPV(pv)
			if err != nil || !ok || got != want {
				t.Errorf("VolumeOfPV() = %+v, %v, %v; want %+v, true, nil", got, ok, err, want)
			}
		})
	}
}

func TestMigratedInlineVolumeIsJudgedOnTheTranslatedSpec(t *testing.T) {
	tests := []struct {
		name   string
		source v1.VolumeSource
		// displayName is the translated PV's name.
		displayName string
		want        migrated
		// readOnly is the translated CSI source's readOnly, which the
		// VolumeAttachment's inline spec carries to the external-attacher.
		readOnly bool
	}{
		{
			name:        "gcePersistentDisk becomes ReadWriteOnce: one node",
			source:      v1.VolumeSource{GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{PDName: "disk-1"}},
			displayName: gcePD + "-disk-1",
			want:        migrated{driver: gcePD, handle: gceHandle, modes: []v1.PersistentVolumeAccessMode{rwo}},
		},
		{
			name:        "read-only gcePersistentDisk becomes ReadOnlyMany: several nodes",
			source:      v1.VolumeSource{GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{PDName: "disk-1", ReadOnly: true}},
			displayName: gcePD + "-disk-1",
			want:        migrated{driver: gcePD, handle: gceHandle, modes: []v1.PersistentVolumeAccessMode{rox}, multiAttach: true},
			readOnly:    true,
		},
		{
			name:        "awsElasticBlockStore becomes ReadWriteOnce: one node",
			source:      v1.VolumeSource{AWSElasticBlockStore: &v1.AWSElasticBlockStoreVolumeSource{VolumeID: "vol-1"}},
			displayName: awsEBS + "-vol-1",
			want:        migrated{driver: awsEBS, handle: "vol-1", modes: []v1.PersistentVolumeAccessMode{rwo}},
		},
		{
			name:        "read-only awsElasticBlockStore stays ReadWriteOnce: one node",
			source:      v1.VolumeSource{AWSElasticBlockStore: &v1.AWSElasticBlockStoreVolumeSource{VolumeID: "vol-1", ReadOnly: true}},
			displayName: awsEBS + "-vol-1",
			want:        migrated{driver: awsEBS, handle: "vol-1", modes: []v1.PersistentVolumeAccessMode{rwo}},
			readOnly:    true,
		},
		{
			name:        "read-only azureDisk stays ReadWriteOnce: one node",
			source:      v1.VolumeSource{AzureDisk: &v1.AzureDiskVolumeSource{DiskName: "d1", DataDiskURI: diskURI, ReadOnly: new(true)}},
			displayName: diskURI,
			want:        migrated{driver: azureDisk, handle: diskURI, modes: []v1.PersistentVolumeAccessMode{rwo}},
			readOnly:    true,
		},
		{
			name:        "azureFile becomes ReadWriteMany: several nodes",
			source:      v1.VolumeSource{AzureFile: &v1.AzureFileVolumeSource{SecretName: fileSecret, ShareName: "share"}},
			displayName: "#acct#share#vol#" + ns,
			want:        migrated{driver: azureFile, handle: "#acct#share#vol#" + ns, modes: []v1.PersistentVolumeAccessMode{rwx}, multiAttach: true},
		},
		{
			name:        "read-only azureFile becomes ReadWriteMany: several nodes",
			source:      v1.VolumeSource{AzureFile: &v1.AzureFileVolumeSource{SecretName: fileSecret, ShareName: "share", ReadOnly: true}},
			displayName: "#acct#share#vol#" + ns,
			want:        migrated{driver: azureFile, handle: "#acct#share#vol#" + ns, modes: []v1.PersistentVolumeAccessMode{rwx}, multiAttach: true},
			readOnly:    true,
		},
		{
			name:        "read-only cinder stays ReadWriteOnce: one node",
			source:      v1.VolumeSource{Cinder: &v1.CinderVolumeSource{VolumeID: "c-1", ReadOnly: true}},
			displayName: cinder + "-c-1",
			want:        migrated{driver: cinder, handle: "c-1", modes: []v1.PersistentVolumeAccessMode{rwo}},
			readOnly:    true,
		},
		{
			name:        "vsphereVolume becomes ReadWriteOnce: one node",
			source:      v1.VolumeSource{VsphereVolume: &v1.VsphereVirtualDiskVolumeSource{VolumePath: vmdk}},
			displayName: vsphere + "-" + vmdk,
			want:        migrated{driver: vsphere, handle: vmdk, modes: []v1.PersistentVolumeAccessMode{rwo}},
		},
		{
			name:        "portworxVolume becomes ReadWriteOnce: one node",
			source:      v1.VolumeSource{PortworxVolume: &v1.PortworxVolumeSource{VolumeID: "px-1"}},
			displayName: portworx + "-px-1",
			want:        migrated{driver: portworx, handle: "px-1", modes: []v1.PersistentVolumeAccessMode{rwo}},
		},
		{
			// The translation marks it ReadOnlyMany and leaves the CSI source's
			// readOnly unset.
			name:        "read-only portworxVolume becomes ReadOnlyMany: several nodes",
			source:      v1.VolumeSource{PortworxVolume: &v1.PortworxVolumeSource{VolumeID: "px-1", ReadOnly: true}},
			displayName: portworx + "-px-1",
			want:        migrated{driver: portworx, handle: "px-1", modes: []v1.PersistentVolumeAccessMode{rox}, multiAttach: true},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := runningPod("web", v1.Volume{Name: "vol", VolumeSource: tc.source})
			w := newWorld(t, pod)
			if err := w.pop.SyncPod(context.Background(), "app/web"); err != nil {
				t.Fatal(err)
			}
			got := w.volumesOf(pod)
			if len(got) != 1 {
				t.Fatalf("desired volumes = %+v, want one", got)
			}
			spec := got[0].InlineSpec
			if spec == nil || spec.CSI == nil {
				t.Fatalf("InlineSpec = %+v, want the translated CSI spec", spec)
			}
			if !slices.Equal(spec.AccessModes, tc.want.modes) || spec.CSI.ReadOnly != tc.readOnly {
				t.Errorf("InlineSpec access modes %v, readOnly %v; want %v, %v", spec.AccessModes, spec.CSI.ReadOnly, tc.want.modes, tc.readOnly)
			}
			want := cache.Volume{
				Name:   volumename.CSI(tc.want.driver, tc.want.handle),
				Driver: tc.want.driver, Handle: tc.want.handle,
				InlineSpec: spec, DisplayName: tc.displayName, MultiAttach: tc.want.multiAttach, Migrated: true,
			}
			if got[0] != want {
				t.Errorf("desired volume = %+v, want %+v", got[0], want)
			}
			// A VolumeAttachment carries the translated spec; the volume it is
			// matched to is judged the same way.
			fromVA, ok := populator.VolumeOfInlineSpec(spec)
			if !ok || fromVA.Name != want.Name || fromVA.MultiAttach != want.MultiAttach {
				t.Errorf("VolumeOfInlineSpec() = %+v, %v; want name %s, multiAttach %v", fromVA, ok, want.Name, want.MultiAttach)
			}
		})
	}
}
