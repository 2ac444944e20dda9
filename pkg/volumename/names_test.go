package volumename

import (
	"crypto/sha256"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestCSI(t *testing.T) {
	tests := []struct {
		name   string
		driver string
		handle string
		want   UniqueName
	}{
		{"plain handle", "example.csi.k8s.io", "vol-1", "kubernetes.io/csi/example.csi.k8s.io^vol-1"},
		{"handle with slashes", "pd.csi.storage.gke.io", "projects/p/zones/z/disks/d", "kubernetes.io/csi/pd.csi.storage.gke.io^projects/p/zones/z/disks/d"},
		{"handle with a caret", "example.csi.k8s.io", "a^b", "kubernetes.io/csi/example.csi.k8s.io^a^b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := CSI(tc.driver, tc.handle); got != tc.want {
				t.Errorf("CSI(%q, %q) = %q, want %q", tc.driver, tc.handle, got, tc.want)
			}
		})
	}
}

func TestParseUniqueName(t *testing.T) {
	tests := []struct {
		name       string
		in         UniqueName
		wantDriver string
		wantHandle string
		wantErr    bool
	}{
		{name: "plain", in: "kubernetes.io/csi/example.csi.k8s.io^vol-1", wantDriver: "example.csi.k8s.io", wantHandle: "vol-1"},
		{name: "handle with one caret", in: "kubernetes.io/csi/example.csi.k8s.io^a^b", wantDriver: "example.csi.k8s.io", wantHandle: "a^b"},
		{name: "handle with several carets", in: "kubernetes.io/csi/d^^x^^", wantDriver: "d", wantHandle: "^x^^"},
		{name: "in-tree plugin name", in: "kubernetes.io/aws-ebs/vol-1", wantErr: true},
		{name: "no caret", in: "kubernetes.io/csi/example.csi.k8s.io", wantErr: true},
		{name: "empty driver", in: "kubernetes.io/csi/^vol-1", wantErr: true},
		{name: "empty handle", in: "kubernetes.io/csi/example.csi.k8s.io^", wantErr: true},
		{name: "empty", in: "", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			driver, handle, err := ParseUniqueName(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ParseUniqueName(%q) = %q, %q, want an error", tc.in, driver, handle)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseUniqueName(%q): %v", tc.in, err)
			}
			if driver != tc.wantDriver || handle != tc.wantHandle {
				t.Errorf("ParseUniqueName(%q) = %q, %q, want %q, %q", tc.in, driver, handle, tc.wantDriver, tc.wantHandle)
			}
		})
	}
}

func TestUniqueNameRoundTrip(t *testing.T) {
	handles := []string{"vol-1", "^", "a^b", "^leading", "trailing^", "projects/p/zones/z/disks/d^x"}
	for _, handle := range handles {
		t.Run(handle, func(t *testing.T) {
			driver, got, err := ParseUniqueName(CSI("example.csi.k8s.io", handle))
			if err != nil {
				t.Fatalf("ParseUniqueName: %v", err)
			}
			if driver != "example.csi.k8s.io" || got != handle {
				t.Errorf("round trip gave driver %q handle %q, want %q %q", driver, got, "example.csi.k8s.io", handle)
			}
		})
	}
}

func TestAttachmentName(t *testing.T) {
	tests := []struct {
		name   string
		handle string
		driver string
		node   string
		golden string
	}{
		{
			name:   "plain",
			handle: "vol-1", driver: "example.csi.k8s.io", node: "node-1",
			golden: "csi-ce5ac23379cf2a370dc129b4211c030477f17d04a28394405e9e3aefa417feae",
		},
		{
			name:   "handle with slashes and a caret",
			handle: "projects/p/zones/z/disks/d^x", driver: "pd.csi.storage.gke.io", node: "worker-7",
			golden: "csi-122076cd61ee249f5a72a268d40c3f8444a8af1899da990d07cb9bdf57784b99",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := AttachmentName(tc.handle, tc.driver, tc.node)
			computed := fmt.Sprintf("csi-%x", sha256.Sum256([]byte(tc.handle+tc.driver+tc.node)))
			if got != computed {
				t.Errorf("AttachmentName(%q, %q, %q) = %q, want %q (sha256 of the concatenation)", tc.handle, tc.driver, tc.node, got, computed)
			}
			if got != tc.golden {
				t.Errorf("AttachmentName(%q, %q, %q) = %q, want golden %q", tc.handle, tc.driver, tc.node, got, tc.golden)
			}
		})
	}
}

func TestAttachmentNameDependsOnEveryPart(t *testing.T) {
	base := AttachmentName("vol-1", "example.csi.k8s.io", "node-1")
	for _, other := range []string{
		AttachmentName("vol-2", "example.csi.k8s.io", "node-1"),
		AttachmentName("vol-1", "other.csi.k8s.io", "node-1"),
		AttachmentName("vol-1", "example.csi.k8s.io", "node-2"),
	} {
		if other == base {
			t.Errorf("different volume, driver or node gave the same name %q", base)
		}
	}
}

func TestMultiAttachAllowed(t *testing.T) {
	tests := []struct {
		name  string
		modes []v1.PersistentVolumeAccessMode
		want  bool
	}{
		{"ReadWriteOnce", []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}, false},
		{"ReadWriteOncePod", []v1.PersistentVolumeAccessMode{v1.ReadWriteOncePod}, false},
		{"ReadWriteMany", []v1.PersistentVolumeAccessMode{v1.ReadWriteMany}, true},
		{"ReadOnlyMany", []v1.PersistentVolumeAccessMode{v1.ReadOnlyMany}, true},
		{"ReadWriteOnce and ReadOnlyMany", []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce, v1.ReadOnlyMany}, true},
		{"ReadWriteOncePod and ReadWriteMany", []v1.PersistentVolumeAccessMode{v1.ReadWriteOncePod, v1.ReadWriteMany}, true},
		{"ReadWriteOnce and ReadWriteOncePod", []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce, v1.ReadWriteOncePod}, false},
		{"none listed", nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := MultiAttachAllowed(tc.modes); got != tc.want {
				t.Errorf("MultiAttachAllowed(%v) = %v, want %v", tc.modes, got, tc.want)
			}
		})
	}
}

func TestInTreeNames(t *testing.T) {
	lun := int32(3)
	tests := []struct {
		name string
		got  func() (UniqueName, error)
		want UniqueName
	}{
		{"iSCSI", func() (UniqueName, error) {
			return ISCSI("10.0.0.1:3260", "iqn.2001-04.com.example:storage.disk1", 0), nil
		},
			"kubernetes.io/iscsi/10.0.0.1:3260:iqn.2001-04.com.example:storage.disk1:0"},
		{"FC target WWNs and LUN", func() (UniqueName, error) {
			return FC([]string{"50060e801049cfd1", "50060e801049cfd2"}, &lun, nil)
		}, "kubernetes.io/fc/[50060e801049cfd1 50060e801049cfd2]:3"},
		{"FC WWIDs", func() (UniqueName, error) {
			return FC(nil, nil, []string{"3600508b400105e210000900000490000"})
		}, "kubernetes.io/fc/[3600508b400105e210000900000490000]"},
		{"FC target WWNs win over WWIDs", func() (UniqueName, error) {
			return FC([]string{"50060e801049cfd1"}, &lun, []string{"wwid"})
		}, "kubernetes.io/fc/[50060e801049cfd1]:3"},
		{"FC target WWNs without a LUN fall back to WWIDs", func() (UniqueName, error) {
			return FC([]string{"50060e801049cfd1"}, nil, []string{"wwid"})
		}, "kubernetes.io/fc/[wwid]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.got()
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if !ReportOnly(got) || IsCSI(got) {
				t.Errorf("%q: ReportOnly = %v, IsCSI = %v, want true, false", got, ReportOnly(got), IsCSI(got))
			}
		})
	}
	if _, err := FC([]string{"50060e801049cfd1"}, nil, nil); err == nil {
		t.Error("FC with target WWNs, no LUN and no WWIDs gave a name, want an error")
	}
}

func TestPluginLabel(t *testing.T) {
	tests := []struct {
		in   UniqueName
		want string
	}{
		{"kubernetes.io/csi/example.csi.k8s.io^vol-1", "kubernetes.io/csi:example.csi.k8s.io"},
		{"kubernetes.io/iscsi/10.0.0.1:3260:iqn.x:0", "kubernetes.io/iscsi"},
		{"kubernetes.io/fc/[a b]:0", "kubernetes.io/fc"},
		{"garbage", "N/A"},
	}
	for _, tc := range tests {
		if got := PluginLabel(tc.in); got != tc.want {
			t.Errorf("PluginLabel(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
