package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/attachdetach-controller/attachdetach-controller/internal/invariant"
	"github.com/attachdetach-controller/attachdetach-controller/internal/killproxy"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

// TestCrashBetweenEveryPairOfWrites runs the life of two volumes (attached to A,
// both moved to B at once, one moved back to A, detached) once to count the controller's writes, then once per write with the
// controller SIGKILLed right after that write (the next one never reaches the API
// server) and restarted. An invariant checker watches the API server the whole
// time: a single-attach volume is never held by two nodes, no volume is detached
// while in use, and every run converges.
func TestCrashBetweenEveryPairOfWrites(t *testing.T) {
	ctx := context.Background()
	checker, err := invariant.Start(ctx, env.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer checker.Stop()
	proxy, kubeconfig := startProxy(t, env.Env)

	var writes []killproxy.Write
	t.Run("no-kill", func(t *testing.T) {
		writes = lifeOfAVolume(t, proxy, kubeconfig, 0)
	})
	if len(writes) == 0 {
		t.Fatal("the run without a kill saw no writes")
	}
	for _, w := range writes {
		t.Logf("write %s", w)
	}
	seen := 0
	for k := 1; k < len(writes); k++ {
		t.Run(fmt.Sprintf("kill-after-write-%d", k), func(t *testing.T) {
			got := lifeOfAVolume(t, proxy, kubeconfig, k)
			if k < len(got) {
				t.Logf("killed between %s and %s", got[k-1], got[k])
			}
			if err := checker.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			violations := checker.Violations()
			for _, v := range violations[seen:] {
				t.Errorf("invariant violated: %s", v)
			}
			seen = len(violations)
			if t.Failed() {
				for _, w := range got {
					t.Logf("write %s", w)
				}
			}
		})
	}
}

// lifeOfAVolume plays two RWO volumes' lives through the proxy, killing the
// controller after write killAfter (0: never) and starting a new one at once.
func lifeOfAVolume(t *testing.T, proxy *killproxy.Proxy, kubeconfig string, killAfter int) []killproxy.Write {
	s := newScenario(t, scenarioOptions{kubeconfig: kubeconfig, noController: true})
	proxy.Reset()
	restarted := make(chan struct{})
	if killAfter > 0 {
		killed := proxy.KillAfter(killAfter, s.killController)
		go func() {
			defer close(restarted)
			select {
			case <-killed:
				proxy.Disarm()
				s.startController()
			case <-t.Context().Done():
			}
		}()
	} else {
		close(restarted)
	}
	s.startController()

	a, b := s.Nodes[0], s.Nodes[1]
	one := s.CreateVolume("one", workload.VolumeOptions{})
	two := s.CreateVolume("two", workload.VolumeOptions{})
	s.CreatePod("one-a", a, one.Claim)
	s.CreatePod("two-a", a, two.Claim)
	s.WaitAttached(one, a)
	s.WaitAttached(two, a)
	// Both move to B at once; then one moves back to A.
	s.DeletePod("one-a")
	s.DeletePod("two-a")
	s.CreatePod("one-b", b, one.Claim)
	s.CreatePod("two-b", b, two.Claim)
	s.WaitAttached(one, b)
	s.WaitAttached(two, b)
	s.DeletePod("one-b")
	s.CreatePod("one-a-again", a, one.Claim)
	s.WaitAttached(one, a)
	s.DeletePod("one-a-again")
	s.DeletePod("two-b")
	s.WaitDetached(one, a)
	s.WaitDetached(two, b)

	writes := proxy.Writes()
	proxy.Disarm()
	if slices.ContainsFunc(writes, func(w killproxy.Write) bool { return w.Outcome == killproxy.Killed }) {
		<-restarted
	}
	return writes
}
