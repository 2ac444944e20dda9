package statusupdater

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodeRecordJudgesTheInformersCopyByItsVersion(t *testing.T) {
	informed := []v1.AttachedVolume{{Name: "informed"}}
	written := []v1.AttachedVolume{{Name: "written"}}
	tests := []struct {
		name    string
		record  *nodeRecord
		version string
		want    []v1.AttachedVolume
	}{
		{"nothing written", &nodeRecord{}, "5", informed},
		{"nothing written, no version", &nodeRecord{}, "", informed},
		{"the base of the write", &nodeRecord{baseVersion: "5", writtenVersion: "7", written: written}, "5", written},
		{"between base and write", &nodeRecord{baseVersion: "5", writtenVersion: "7", written: written}, "6", written},
		{"the write itself", &nodeRecord{baseVersion: "5", writtenVersion: "7", written: written}, "7", written},
		{"newer than the write", &nodeRecord{baseVersion: "5", writtenVersion: "7", written: written}, "8", informed},
		{"the base, versions not comparable", &nodeRecord{baseVersion: "a", writtenVersion: "b", written: written}, "a", written},
		{"another, versions not comparable", &nodeRecord{baseVersion: "a", writtenVersion: "b", written: written}, "c", informed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", ResourceVersion: tc.version}, Status: v1.NodeStatus{VolumesAttached: informed}}
			if got := tc.record.current(node); !slices.Equal(got, tc.want) {
				t.Errorf("current at version %s = %v, want %v", tc.version, got, tc.want)
			}
		})
	}
}
