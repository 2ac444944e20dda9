package externalattacher

import (
	"reflect"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestArgs(t *testing.T) {
	base := []string{"--kubeconfig=/k", "--csi-address=/s.sock", "--leader-election=false"}
	tests := []struct {
		name string
		opts Options
		want []string
	}{
		{
			name: "defaults",
			opts: Options{Kubeconfig: "/k", CSIAddress: "/s.sock"},
			want: append(base, "--v=4"),
		},
		{
			name: "everything",
			opts: Options{
				Kubeconfig: "/k", CSIAddress: "/s.sock", Verbosity: 5,
				Timeout: 10 * time.Second, RetryIntervalStart: 100 * time.Millisecond, RetryIntervalMax: 2 * time.Second,
				Resync: time.Minute, WorkerThreads: 3, KubeAPIQPS: 50.5, KubeAPIBurst: 100,
				ExtraArgs: []string{"--default-fstype=ext4"},
			},
			want: append(base, "--v=5", "--timeout=10s", "--retry-interval-start=100ms", "--retry-interval-max=2s",
				"--resync=1m0s", "--worker-threads=3", "--kube-api-qps=50.5", "--kube-api-burst=100", "--default-fstype=ext4"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.opts.Args(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Args() =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

func TestEnsureCSINode(t *testing.T) {
	other := storagev1.CSINodeDriver{Name: "other.example.com", NodeID: "other-id"}
	tests := []struct {
		name     string
		existing *storagev1.CSINode
		want     []storagev1.CSINodeDriver
	}{
		{
			name: "creates the CSINode",
			want: []storagev1.CSINodeDriver{{Name: "d.example.com", NodeID: "id-1"}},
		},
		{
			name:     "adds the driver",
			existing: &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{other}}},
			want:     []storagev1.CSINodeDriver{other, {Name: "d.example.com", NodeID: "id-1"}},
		},
		{
			name: "updates the node ID",
			existing: &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: storagev1.CSINodeSpec{
				Drivers: []storagev1.CSINodeDriver{{Name: "d.example.com", NodeID: "old"}, other},
			}},
			want: []storagev1.CSINodeDriver{{Name: "d.example.com", NodeID: "id-1"}, other},
		},
		{
			name: "keeps a matching entry",
			existing: &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: storagev1.CSINodeSpec{
				Drivers: []storagev1.CSINodeDriver{{Name: "d.example.com", NodeID: "id-1"}},
			}},
			want: []storagev1.CSINodeDriver{{Name: "d.example.com", NodeID: "id-1"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset()
			if tt.existing != nil {
				client = fake.NewClientset(tt.existing)
			}
			got, err := EnsureCSINode(t.Context(), client, "node-1", "d.example.com", "id-1")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Spec.Drivers, tt.want) {
				t.Errorf("returned drivers %+v, want %+v", got.Spec.Drivers, tt.want)
			}
			stored, err := client.StorageV1().CSINodes().Get(t.Context(), "node-1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(stored.Spec.Drivers, tt.want) {
				t.Errorf("stored drivers %+v, want %+v", stored.Spec.Drivers, tt.want)
			}
		})
	}
}
