package csivolume

import (
	"crypto/sha256"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestNewUniqueName(t *testing.T) {
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
			if got := NewUniqueName(tc.driver, tc.handle); got != tc.want {
				t.Errorf("NewUniqueName(%q, %q) = %q, want %q", tc.driver, tc.handle, got, tc.want)
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
			driver, got, err := ParseUniqueName(NewUniqueName("example.csi.k8s.io", handle))
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
