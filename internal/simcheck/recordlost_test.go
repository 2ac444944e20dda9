package simcheck

import (
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/attachdetach-controller/attachdetach-controller/internal/fakeapi"
	"github.com/attachdetach-controller/attachdetach-controller/internal/safetyrules"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
)

// TestAnAttachmentWhoseRecordWentWithItsNodeStaysUncountedWhenTheNodeComesAndGoesAgain:
// an RWO Fibre Channel volume is attached and mounted on node-b, whose Node
// object, the only record of that attachment, is deleted before the running
// controller is ready; no controller can know of it, so listing the volume on
// node-a is no violation of rule 3. Node-b then comes back without the volume in
// its volumesAttached and is deleted again, after the controller was ready: the
// controller still had no record (seed 32801). Had node-b listed the volume
// again in between, the controller would have known, and the listing counts.
func TestAnAttachmentWhoseRecordWentWithItsNodeStaysUncountedWhenTheNodeComesAndGoesAgain(t *testing.T) {
	tests := []struct {
		name           string
		listedOnReturn bool
		wantViolations int
	}{
		{"node-b back without the volume", false, 0},
		{"node-b back listing the volume", true, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mounts := sim.NewMounts()
				var reported []string
				c := New(safetyrules.Settings{MaxWait: time.Minute, Grace: time.Second, NeverForce: func(string) bool { return true }}, mounts,
					func(msg string) { reported = append(reported, msg) })
				store := fakeapi.NewStore(c.Observe)
				pv := &corev1.PersistentVolume{
					ObjectMeta: metav1.ObjectMeta{Name: "pv-0"},
					Spec: corev1.PersistentVolumeSpec{
						AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
						PersistentVolumeSource: corev1.PersistentVolumeSource{
							FC: &corev1.FCVolumeSource{TargetWWNs: []string{"500a0981891b8dc5"}, Lun: ptr.To[int32](0)},
						},
					},
				}
				vol := sim.FCVolumeName(pv.Spec.FC)
				nodeListing := func(name string, volumes ...string) *corev1.Node {
					n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
					n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
					for _, v := range volumes {
						n.Status.VolumesAttached = append(n.Status.VolumesAttached, corev1.AttachedVolume{Name: corev1.UniqueVolumeName(v)})
						n.Status.VolumesInUse = append(n.Status.VolumesInUse, corev1.UniqueVolumeName(v))
					}
					return n
				}
				must := func(_ any, err error) {
					t.Helper()
					if err != nil {
						t.Fatal(err)
					}
				}
				nodeB := fakeapi.Ref{Resource: fakeapi.Nodes, Name: "node-b"}

				must(store.Create("world", pv))
				must(store.Create("controller", nodeListing("node-b", vol)))
				mounts.Set("node-b", vol, true)
				time.Sleep(time.Second)
				must(nil, store.Delete("admin", nodeB))
				time.Sleep(time.Second)
				c.ControllerReady()
				time.Sleep(time.Second)
				if tc.listedOnReturn {
					must(store.Create("world", nodeListing("node-b", vol)))
				} else {
					must(store.Create("world", nodeListing("node-b")))
				}
				time.Sleep(time.Second)
				must(nil, store.Delete("admin", nodeB))
				time.Sleep(time.Second)
				must(store.Create("controller", nodeListing("node-a", vol)))

				if len(reported) != tc.wantViolations {
					t.Errorf("violations %q, want %d", reported, tc.wantViolations)
				}
			})
		})
	}
}
