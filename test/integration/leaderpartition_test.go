package integration

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/internal/controllerproc"
	"github.com/attachdetach-controller/attachdetach-controller/internal/killproxy"
	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
)

// partitionLength is how long the leader is cut off, as the issue asks: twice the
// default lease duration.
const partitionLength = 30 * time.Second

// startReplica starts a leader-elected controller on the scenario's Lease, with more
// flags, killed when the test ends if it still runs then.
func (s *scenario) startReplica(name, kubeconfig, lease string, args ...string) *controllerproc.Controller {
	s.T.Helper()
	r, err := controllerproc.New(s.T.Context(), controllerproc.Options{
		Binary:      env.Controller,
		Kubeconfig:  kubeconfig,
		LogFile:     filepath.Join(s.T.TempDir(), name+".log"),
		LeaderElect: true,
		Args:        append([]string{"--leader-elect-resource-namespace=" + s.Namespace, "--leader-elect-resource-name=" + lease}, args...),
	})
	s.Must(err)
	suite.KeepLogOnFailure(s.T, env.Env, "replica-"+name, r.LogFile())
	s.Must(r.Start(s.T.Context()))
	s.T.Cleanup(func() {
		if s.T.Failed() {
			s.T.Logf("replica %s log tail:\n%s", name, r.LogTail(40))
		}
		_ = r.Kill()
	})
	return r
}

// waitLeader waits until the replica holds the scenario's Lease.
func (s *scenario) waitLeader(lease string, r *controllerproc.Controller, timeout time.Duration) {
	s.T.Helper()
	suite.WaitLeader(s.T, s.Client, r, s.Namespace, lease, timeout)
}

// TestLeaderPartition runs two replicas with the default lease settings; the leader
// talks to the API server through a proxy. While pods move, the proxy cuts the
// leader's connections and refuses new ones for 30 s, then lets them through again,
// and the pods move once more. The standby must take over and converge during the
// partition; the old leader, whose view stopped at the cut, must write nothing after
// it, not even once connections work again; the invariant checker must find nothing.
func TestLeaderPartition(t *testing.T) {
	const lease = "partition"
	suite.StartChecker(t, env.Env)
	proxy, proxyKubeconfig := startProxy(t, env.Env)
	s := newScenario(t, scenarioOptions{SimOptions: suite.SimOptions{Nodes: 3}, noController: true})
	a := s.startReplica("a", proxyKubeconfig, lease)
	s.waitLeader(lease, a, suite.WaitTimeout)
	b := s.startReplica("b", env.AdminKubeconfig, lease)
	// The scenario's clean-up waits for b to detach everything, then stops it.
	s.ctrl = b
	suite.WaitLog(t, b, suite.WaitTimeout, `"Another replica leads"`)
	f := newFleet(s, 4, 1)
	f.waitConverged(suite.WaitTimeout)

	// The partition begins as soon as the leader has started on a move.
	before := proxy.Count()
	f.move()
	s.Eventually("the leader to write after the move", func() bool { return proxy.Count() > before })
	cut := proxy.Partition()
	restore := cut.Add(partitionLength)
	f.move()
	s.waitLeader(lease, b, partitionLength)
	tookOver := time.Since(cut)
	took := f.waitConverged(time.Until(restore))
	t.Logf("partition at %s: b took the lease %s later; round %d converged %s after that",
		cut.Format(time.StampMilli), tookOver.Round(time.Millisecond), f.round, took.Round(time.Millisecond))
	select {
	case <-a.Process().Done():
		t.Logf("old leader exited %s into the partition: %v", time.Since(cut).Round(time.Millisecond), a.Process().Err())
	case <-time.After(time.Until(restore)):
		t.Log("old leader still runs at the end of the partition")
	}
	time.Sleep(time.Until(restore))
	proxy.Restore()
	t.Logf("connections restored at %s", time.Now().Format(time.StampMilli))

	// The old leader, if it still runs, sees the world again: one more round.
	f.move()
	f.waitConverged(suite.WaitTimeout)
	f.deleteAll()
	f.waitConverged(suite.WaitTimeout)

	var late []string
	for _, w := range proxy.Writes() {
		if w.Reached() && !w.Forwarded.Before(cut) {
			late = append(late, fmt.Sprintf("%s at %s", w, w.Forwarded.Format(time.StampMilli)))
		}
	}
	if len(late) > 0 {
		t.Errorf("the old leader wrote after the partition began at %s:\n%s", cut.Format(time.StampMilli), strings.Join(late, "\n"))
	}
	if a.Process().Running() {
		t.Logf("old leader still runs after the partition; its log tail:\n%s", a.Process().LogTail(20))
	}
	for _, w := range proxy.Writes() {
		if w.Outcome == killproxy.Refused {
			t.Logf("refused at the partition: %s", w)
		}
	}
}

// shortLeaseArgs are lease timings shorter than the defaults (15s, 10s, 2s), in about
// the same proportions.
var shortLeaseArgs = []string{
	"--leader-elect-lease-duration=4s",
	"--leader-elect-renew-deadline=3s",
	"--leader-elect-retry-period=500ms",
}

// isLeaseRequest tells whether a request is about a Lease.
func isLeaseRequest(r *http.Request) bool {
	return killproxy.ParseRequest(r.URL.Path).Resource == "leases"
}

// TestLeaderLosesOnlyTheLease runs two replicas with short lease timings; the leader
// talks to the API server through a proxy that, from some moment on, resets every
// connection of its Lease requests and lets its other requests through. Pods keep
// moving. The leader cannot renew, the standby takes the Lease over once it expires,
// and from then on the old leader must write nothing: it must have stopped acting on
// its own once it could not renew, before the Lease could expire.
func TestLeaderLosesOnlyTheLease(t *testing.T) {
	const lease = "lease-only"
	suite.StartChecker(t, env.Env)
	proxy, proxyKubeconfig := startProxy(t, env.Env)
	s := newScenario(t, scenarioOptions{SimOptions: suite.SimOptions{Nodes: 3}, noController: true})
	a := s.startReplica("a", proxyKubeconfig, lease, shortLeaseArgs...)
	s.waitLeader(lease, a, suite.WaitTimeout)
	b := s.startReplica("b", env.AdminKubeconfig, lease, shortLeaseArgs...)
	s.ctrl = b
	suite.WaitLog(t, b, suite.WaitTimeout, `"Another replica leads"`)
	f := newFleet(s, 4, 1)
	f.waitConverged(suite.WaitTimeout)

	proxy.SetFaults(killproxy.When(isLeaseRequest, killproxy.Rule(func(*http.Request) killproxy.Fault { return killproxy.ResetConnection })))
	cut := time.Now()
	// Pods move every half second until the standby leads and the old leader has
	// exited, so that there is work for both.
	bID := suite.WaitIdentity(t, b)
	var tookOver time.Time
	for tookOver.IsZero() || a.Process().Running() {
		if time.Since(cut) > suite.WaitTimeout {
			t.Fatalf("%s after the Lease requests began to fail: standby leads: %t, old leader runs: %t", suite.WaitTimeout, !tookOver.IsZero(), a.Process().Running())
		}
		f.move()
		for next := time.Now().Add(500 * time.Millisecond); time.Now().Before(next); time.Sleep(suite.PollInterval) {
			if tookOver.IsZero() && suite.LeaseHolder(t.Context(), s.Client, s.Namespace, lease) == bID {
				tookOver = time.Now()
			}
		}
	}
	t.Logf("Lease requests of a failing from %s; b seen leading %s later; a exited %s later: %v",
		cut.Format(time.StampMilli), tookOver.Sub(cut).Round(time.Millisecond),
		time.Since(cut).Round(time.Millisecond), a.Process().Err())
	f.waitConverged(suite.WaitTimeout)
	f.deleteAll()
	f.waitConverged(suite.WaitTimeout)

	var late []string
	for _, w := range proxy.Writes() {
		if w.Reached() && w.Info.Resource != "leases" && !w.Forwarded.Before(tookOver) {
			late = append(late, fmt.Sprintf("%s at %s", w, w.Forwarded.Format(time.StampMilli)))
		}
	}
	if len(late) > 0 {
		t.Errorf("the old leader wrote after b was seen leading at %s:\n%s", tookOver.Format(time.StampMilli), strings.Join(late, "\n"))
	}
}
