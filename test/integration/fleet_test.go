package integration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/attachdetach-controller/attachdetach-controller/internal/invariant"
	"github.com/attachdetach-controller/attachdetach-controller/internal/killproxy"
	"github.com/attachdetach-controller/attachdetach-controller/internal/proc"
	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
)

// fleet is a set of volumes whose pods move between the scenario's nodes, round after
// round, for the fault tests: each single-attach (ReadWriteOnce) volume is used by one
// pod that moves to the next node, each ReadWriteMany volume by pods on two adjacent
// nodes that move on by one. A move creates the replacement pod and deletes the old
// one at once, so a single-attach volume's new pod waits for its detach.
type fleet struct {
	s     *scenario
	rwo   []volume
	rwx   []volume
	round int
	// pods are the pods of the current round, by name.
	pods map[string]placement
}

// placement is a pod's node and volume.
type placement struct {
	node string
	vol  volume
}

// newFleet creates the volumes and the first round's pods.
func newFleet(s *scenario, rwo, rwx int) *fleet {
	s.t.Helper()
	f := &fleet{s: s, pods: map[string]placement{}}
	for i := range rwo {
		f.rwo = append(f.rwo, s.createVolume(fmt.Sprintf("rwo-%d", i), volumeOptions{}))
	}
	for i := range rwx {
		f.rwx = append(f.rwx, s.createVolume(fmt.Sprintf("rwx-%d", i), volumeOptions{modes: []v1.PersistentVolumeAccessMode{v1.ReadWriteMany}}))
	}
	f.createPods()
	return f
}

// createPods creates the current round's pods and returns the previous round's.
func (f *fleet) createPods() map[string]placement {
	old := f.pods
	f.pods = map[string]placement{}
	n := len(f.s.nodes)
	for i, vol := range f.rwo {
		f.pods[fmt.Sprintf("%s-r%d", vol.claim, f.round)] = placement{node: f.s.nodes[(i+f.round)%n], vol: vol}
	}
	for i, vol := range f.rwx {
		for j := range 2 {
			f.pods[fmt.Sprintf("%s-%d-r%d", vol.claim, j, f.round)] = placement{node: f.s.nodes[(i+j+f.round)%n], vol: vol}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(f.pods)) {
		p := f.pods[name]
		f.s.createPod(name, p.node, p.vol.claim)
	}
	return old
}

// move starts the next round: new pods on the next nodes, the old ones deleted.
func (f *fleet) move() {
	f.s.t.Helper()
	f.round++
	old := f.createPods()
	for _, name := range slices.Sorted(maps.Keys(old)) {
		f.s.deletePod(name)
	}
}

// deleteAll deletes the current pods: converged, nothing is attached.
func (f *fleet) deleteAll() {
	f.s.t.Helper()
	for _, name := range slices.Sorted(maps.Keys(f.pods)) {
		f.s.deletePod(name)
	}
	f.pods = map[string]placement{}
}

// converged tells why the cluster is not in the state the current pods call for: a
// VolumeAttachment, attached, for each pod's volume on its node and no other of the
// scenario's driver, and each node's volumesAttached listing exactly its pods' volumes.
func (f *fleet) converged(ctx context.Context) error {
	wantVA := map[string]bool{}
	wantStatus := map[string]map[v1.UniqueVolumeName]bool{}
	for _, n := range f.s.nodes {
		wantStatus[n] = map[v1.UniqueVolumeName]bool{}
	}
	for _, p := range f.pods {
		wantVA[f.s.vaName(p.vol, p.node)] = false
		wantStatus[p.node][v1.UniqueVolumeName(p.vol.unique)] = true
	}
	var problems []error
	for _, va := range f.s.attachments() {
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
	for _, name := range f.s.nodes {
		node, err := f.s.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
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
	f.s.t.Helper()
	begin := time.Now()
	var err error
	for err = f.converged(f.s.ctx); err != nil; err = f.converged(f.s.ctx) {
		if time.Since(begin) > timeout {
			f.s.t.Fatalf("round %d not converged after %s:\n%v", f.round, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(begin)
}

// startChecker starts the invariant checker on a control plane; when the test ends
// (after the scenario's clean-up, if started before the scenario) it stops it and
// fails the test with every violation found.
func startChecker(t *testing.T, e *testenv.Env) *invariant.Checker {
	t.Helper()
	checker, err := invariant.Start(context.Background(), e.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		checker.Stop()
		if violations := checker.Violations(); len(violations) > 0 {
			t.Errorf("invariants violated:\n%s", strings.Join(violations, "\n"))
		}
	})
	return checker
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

// keepLogOnFailure copies a process log into the control plane's directory when the
// test fails, where testenv keeps the logs of failed runs and says so.
func keepLogOnFailure(t *testing.T, e *testenv.Env, name string, p *proc.Process) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		data, err := os.ReadFile(p.LogPath())
		if err == nil {
			dest := filepath.Join(e.Dir, strings.ReplaceAll(t.Name(), "/", "_")+"-"+name+".log")
			err = os.WriteFile(dest, data, 0o644)
			t.Logf("%s log kept in %s", name, dest)
		}
		if err != nil {
			t.Logf("keeping the %s log: %v", name, err)
		}
	})
}
