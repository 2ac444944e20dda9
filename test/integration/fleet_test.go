package integration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/attachdetach-controller/attachdetach-controller/internal/killproxy"
	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

// fleet is a set of volumes whose pods move between the scenario's nodes, round after
// round, for the fault tests: each single-attach (ReadWriteOnce) volume is used by one
// pod that moves to the next node, each ReadWriteMany volume by pods on two adjacent
// nodes that move on by one. A move creates the replacement pod and deletes the old
// one at once, so a single-attach volume's new pod waits for its detach.
type fleet struct {
	s     *scenario
	rwo   []workload.Volume
	rwx   []workload.Volume
	round int
	// pods are the pods of the current round, by name.
	pods map[string]placement
}

// placement is a pod's node and volume.
type placement struct {
	node string
	vol  workload.Volume
}

// newFleet creates the volumes and the first round's pods.
func newFleet(s *scenario, rwo, rwx int) *fleet {
	s.T.Helper()
	f := &fleet{s: s, pods: map[string]placement{}}
	for i := range rwo {
		f.rwo = append(f.rwo, s.CreateVolume(fmt.Sprintf("rwo-%d", i), workload.VolumeOptions{}))
	}
	for i := range rwx {
		f.rwx = append(f.rwx, s.CreateVolume(fmt.Sprintf("rwx-%d", i), workload.VolumeOptions{Modes: []v1.PersistentVolumeAccessMode{v1.ReadWriteMany}}))
	}
	f.createPods()
	return f
}

// createPods creates the current round's pods and returns the previous round's.
func (f *fleet) createPods() map[string]placement {
	old := f.pods
	f.pods = map[string]placement{}
	n := len(f.s.Nodes)
	for i, vol := range f.rwo {
		f.pods[fmt.Sprintf("%s-r%d", vol.Claim, f.round)] = placement{node: f.s.Nodes[(i+f.round)%n], vol: vol}
	}
	for i, vol := range f.rwx {
		for j := range 2 {
			f.pods[fmt.Sprintf("%s-%d-r%d", vol.Claim, j, f.round)] = placement{node: f.s.Nodes[(i+j+f.round)%n], vol: vol}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(f.pods)) {
		p := f.pods[name]
		f.s.CreatePod(name, p.node, p.vol.Claim)
	}
	return old
}

// move starts the next round: new pods on the next nodes, the old ones deleted.
func (f *fleet) move() {
	f.s.T.Helper()
	f.round++
	old := f.createPods()
	for _, name := range slices.Sorted(maps.Keys(old)) {
		f.s.DeletePod(name)
	}
}

// deleteAll deletes the current pods: converged, nothing is attached.
func (f *fleet) deleteAll() {
	f.s.T.Helper()
	for _, name := range slices.Sorted(maps.Keys(f.pods)) {
		f.s.DeletePod(name)
	}
	f.pods = map[string]placement{}
}

// converged tells why the cluster is not in the state the current pods call for: a
// VolumeAttachment, attached, for each pod's volume on its node and no other of the
// scenario's driver, and each node's volumesAttached listing exactly its pods' volumes.
func (f *fleet) converged(ctx context.Context) error {
	wantVA := map[string]bool{}
	wantStatus := map[string]map[v1.UniqueVolumeName]bool{}
	for _, n := range f.s.Nodes {
		wantStatus[n] = map[v1.UniqueVolumeName]bool{}
	}
	for _, p := range f.pods {
		wantVA[p.vol.AttachmentName(p.node)] = false
		wantStatus[p.node][v1.UniqueVolumeName(p.vol.UniqueName())] = true
	}
	var problems []error
	for _, va := range f.s.Attachments() {
		if _, ok := wantVA[va.Name]; !ok {
			problems = append(problems, fmt.Errorf("VolumeAttachment %s of %s on %s is not wanted", va.Name, ptr.Deref(va.Spec.Source.PersistentVolumeName, "an inline volume"), va.Spec.NodeName))
			continue
		}
		wantVA[va.Name] = va.Status.Attached
	}
	for _, name := range slices.Sorted(maps.Keys(wantVA)) {
		if !wantVA[name] {
			problems = append(problems, fmt.Errorf("VolumeAttachment %s missing or not attached", name))
		}
	}
	for _, name := range f.s.Nodes {
		node, err := f.s.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading node %s: %w", name, err)
		}
		listed := map[v1.UniqueVolumeName]bool{}
		for _, av := range node.Status.VolumesAttached {
			listed[av.Name] = true
		}
		if !maps.Equal(listed, wantStatus[name]) {
			problems = append(problems, fmt.Errorf("node %s lists %v in volumesAttached, want %v",
				name, slices.Sorted(maps.Keys(listed)), slices.Sorted(maps.Keys(wantStatus[name]))))
		}
	}
	return errors.Join(problems...)
}

// waitConverged waits until the cluster is in the state the current pods call for,
// and returns how long that took.
func (f *fleet) waitConverged(timeout time.Duration) time.Duration {
	f.s.T.Helper()
	begin := time.Now()
	suite.EventuallySucceeds(f.s.T, timeout, fmt.Sprintf("round %d to converge", f.round), func() error {
		return f.converged(f.s.T.Context())
	})
	return time.Since(begin)
}

// startProxy starts a fault proxy in front of a control plane, closed when the test
// ends (after the scenario's clean-up, if started before the scenario), and writes a
// kubeconfig for it.
func startProxy(t *testing.T, e *testenv.Env) (proxy *killproxy.Proxy, kubeconfig string) {
	t.Helper()
	proxy, err := killproxy.Start(context.Background(), killproxy.Options{Upstream: e.AdminConfig()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	kubeconfig = filepath.Join(t.TempDir(), "proxy.kubeconfig")
	if err := proxy.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	return proxy, kubeconfig
}

// cutWatchesEvery resets the connections of the watches through the proxy every
// period, until the returned function is called; that returns how many it reset.
func cutWatchesEvery(proxy *killproxy.Proxy, period time.Duration) (stop func() int) {
	done := make(chan struct{})
	cuts := make(chan int)
	go func() {
		ticker := time.NewTicker(period)
		defer ticker.Stop()
		n := 0
		for {
			select {
			case <-ticker.C:
				n += proxy.CutConnections(killproxy.IsWatch)
			case <-done:
				cuts <- n
				return
			}
		}
	}()
	return func() int {
		close(done)
		return <-cuts
	}
}
