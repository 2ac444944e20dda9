package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/attachdetach-controller/attachdetach-controller/internal/invariant"
	"github.com/attachdetach-controller/attachdetach-controller/internal/killproxy"
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
	proxy, err := killproxy.Start(ctx, killproxy.Options{Upstream: env.AdminConfig()})
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	kubeconfig := filepath.Join(t.TempDir(), "proxy.kubeconfig")
	if err := proxy.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}

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
			case <-s.ctx.Done():
			}
		}()
	} else {
		close(restarted)
	}
	s.startController()

	a, b := s.nodes[0], s.nodes[1]
	one := s.createVolume("one", volumeOptions{})
	two := s.createVolume("two", volumeOptions{})
	s.createPod("one-a", a, one.claim)
	s.createPod("two-a", a, two.claim)
	s.waitAttached(one, a)
	s.waitAttached(two, a)
	// Both move to B at once; then one moves back to A.
	s.deletePod("one-a")
	s.deletePod("two-a")
	s.createPod("one-b", b, one.claim)
	s.createPod("two-b", b, two.claim)
	s.waitAttached(one, b)
	s.waitAttached(two, b)
	s.deletePod("one-b")
	s.createPod("one-a-again", a, one.claim)
	s.waitAttached(one, a)
	s.deletePod("one-a-again")
	s.deletePod("two-b")
	s.waitDetached(one, a)
	s.waitDetached(two, b)

	writes := proxy.Writes()
	proxy.Disarm()
	if slices.ContainsFunc(writes, func(w killproxy.Write) bool { return w.Outcome == killproxy.Killed }) {
		<-restarted
	}
	return writes
}
