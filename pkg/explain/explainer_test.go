package explain_test

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/explain"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/populator"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/reconciler"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

const (
	driver = "example.csi.k8s.io"
	vaName = "csi-va-1"
)

// operations stands for the leader's executor: one operation running, with a
// failed attach before it.
type operations struct{}

func (operations) IsRunning(volumename.UniqueName, string) bool { return true }

func (operations) Backoff(volumename.UniqueName, string) (time.Duration, string) {
	return 90 * time.Second, "attach"
}

// world is the state of an explanation: a volume attached to node-a that no pod
// needs, kubelet no longer using it, with the rules of a real reconciler.
type world struct {
	nodes, attachments toolscache.Indexer
	desired            *cache.DesiredState
	actual             *cache.ActualState
	register           *cache.Nodes
	rules              *reconciler.Reconciler
}

func newWorld(t *testing.T, policy reconciler.UnmountPolicy, detachOnShutdownTaint bool) (*world, volumename.UniqueName) {
	t.Helper()
	w := &world{
		nodes:       toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{}),
		attachments: toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{}),
		desired:     cache.NewDesiredState(),
		actual:      cache.NewActualState(),
		register:    cache.NewNodes(),
	}
	w.rules = reconciler.New(reconciler.Config{
		Desired: w.desired, Actual: w.actual, Nodes: w.register,
		UnmountPolicy: policy, DetachOnShutdownTaint: detachOnShutdownTaint,
	})
	vol := volumename.CSI(driver, "h-1")
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a", Annotations: map[string]string{cache.ManagedAnnotation: "true"}},
		Status: v1.NodeStatus{
			Conditions:      []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
			VolumesAttached: []v1.AttachedVolume{{Name: v1.UniqueVolumeName(vol)}},
		},
	}
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: vaName},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: driver, NodeName: "node-a",
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-1")},
		},
		Status: storagev1.VolumeAttachmentStatus{Attached: true},
	}
	for _, add := range []func() error{func() error { return w.nodes.Add(node) }, func() error { return w.attachments.Add(va) }} {
		if err := add(); err != nil {
			t.Fatal(err)
		}
	}
	w.register.Set(cache.NodeFromObject(node))
	w.actual.Observe(cache.Observation{Volume: vol, Node: "node-a", VolumeAttachment: vaName, UID: types.UID("uid-" + vaName), Attached: true})
	return w, vol
}

func (w *world) explainer() *explain.Explainer {
	empty := func() toolscache.Indexer {
		return toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	}
	pods, claims, pvs := corelisters.NewPodLister(empty()), corelisters.NewPersistentVolumeClaimLister(empty()), corelisters.NewPersistentVolumeLister(empty())
	return explain.New(explain.Source{
		Listers: explain.Listers{
			Pods: pods, Claims: claims, PVs: pvs,
			Nodes:       corelisters.NewNodeLister(w.nodes),
			Attachments: storagelisters.NewVolumeAttachmentLister(w.attachments),
		},
		Desired:    w.desired,
		Actual:     w.actual,
		Nodes:      w.register,
		Resolver:   populator.New(populator.Listers{Pods: pods, Claims: claims, PVs: pvs}, w.desired, nil),
		Rules:      w.rules,
		Operations: operations{},
	})
}

func TestExplainerReportsTheReconcilersDecisionOnEveryNode(t *testing.T) {
	w, vol := newWorld(t, reconciler.UnmountPolicy{Default: reconciler.DriverUnmountPolicy{MaxWait: 6 * time.Minute}}, false)
	for _, live := range []bool{false, true} {
		r, err := w.explainer().Explain(context.Background(), explain.Target{Kind: explain.Node, Name: "node-a"}, live)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Volumes) != 1 || len(r.Volumes[0].Nodes) != 1 {
			t.Fatalf("live %v: report = %+v, want the one volume on node-a", live, r)
		}
		decisions := w.rules.Explain(vol, live)
		v, n := r.Volumes[0], r.Volumes[0].Nodes[0]
		if v.Name != string(vol) || v.PV != "pv-1" || v.Display != "pv-1" {
			t.Errorf("live %v: volume = %s, PV %q, display %q; want %s named by its VolumeAttachment's PV pv-1", live, v.Name, v.PV, v.Display, vol)
		}
		if n.Action != string(decisions[0].Action) || n.Reason != decisions[0].Reason() || n.Action != string(reconciler.ActionDetach) {
			t.Errorf("live %v: node-a: %s, %q; want the reconciler's %s, %q", live, n.Action, n.Reason, decisions[0].Action, decisions[0].Reason())
		}
		if len(n.Attachments) != 1 || n.Attachments[0].Name != vaName || !n.Attachments[0].Attached || !n.ListedAttached || n.ListedInUse || n.Policy != "6m0s" {
			t.Errorf("live %v: node-a = %+v, want %s attached, listed attached, not in use, policy 6m0s", live, n, vaName)
		}
		wantSource, wantRunning, wantBackoff := "snapshot", false, ""
		if live {
			wantSource, wantRunning, wantBackoff = "leader", true, "the last attach failed: the next may start in 1m30s"
		}
		if r.Source != wantSource || n.Running != wantRunning || n.Backoff != wantBackoff {
			t.Errorf("live %v: source %q, running %v, backoff %q; want %q, %v, %q", live, r.Source, n.Running, n.Backoff, wantSource, wantRunning, wantBackoff)
		}
	}
}

func TestExplainerStatesTheDetachPolicyInTheControllersFlags(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		policy                reconciler.UnmountPolicy
		detachOnShutdownTaint bool
		want                  string
	}{
		{name: "the default", policy: reconciler.UnmountPolicy{Default: reconciler.DriverUnmountPolicy{MaxWait: 6 * time.Minute}},
			want: "--max-wait-for-unmount=6m0s"},
		{
			name: "every setting",
			policy: reconciler.UnmountPolicy{
				Default:    reconciler.DriverUnmountPolicy{MaxWait: time.Minute},
				NeverForce: true,
				PerDriver:  map[string]reconciler.DriverUnmountPolicy{"slow": {MaxWait: time.Hour}, "careful": {NeverForce: true}},
			},
			detachOnShutdownTaint: true,
			want:                  "--max-wait-for-unmount=1m0s --max-wait-for-unmount-per-driver=careful=never,slow=1h0m0s --disable-force-detach-on-timeout --detach-on-shutdown-taint",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, _ := newWorld(t, tc.policy, tc.detachOnShutdownTaint)
			r, err := w.explainer().Explain(context.Background(), explain.Target{Kind: explain.Node, Name: "node-a"}, false)
			if err != nil {
				t.Fatal(err)
			}
			if r.DetachPolicy != tc.want {
				t.Errorf("detach policy = %q, want %q", r.DetachPolicy, tc.want)
			}
		})
	}
}

func TestExplainerSaysWhatItCannotFind(t *testing.T) {
	w, _ := newWorld(t, reconciler.UnmountPolicy{Default: reconciler.DriverUnmountPolicy{MaxWait: time.Minute}}, false)
	for _, tc := range []struct {
		target explain.Target
		want   string
	}{
		{explain.Target{Kind: explain.Pod, Namespace: "ns", Name: "db"}, "pod/db -n ns not found"},
		{explain.Target{Kind: explain.Claim, Namespace: "ns", Name: "data"}, "pvc/data -n ns not found"},
		{explain.Target{Kind: explain.PV, Name: "pv-2"}, "pv/pv-2 not found"},
		{explain.Target{Kind: explain.Node, Name: "node-b"}, "node node-b not found"},
		{explain.Target{Kind: explain.VolumeAttachment, Name: "csi-va-2"}, "volumeattachment/csi-va-2 not found"},
	} {
		if _, err := w.explainer().Explain(context.Background(), tc.target, false); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("explaining %s: error %v, want %q", tc.target, err, tc.want)
		}
	}
}
