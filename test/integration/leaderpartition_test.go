package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/attachdetach-controller/attachdetach-controller/internal/killproxy"
	"github.com/attachdetach-controller/attachdetach-controller/internal/proc"
)

// partitionLength is how long the leader is cut off, as the issue asks: twice the
// default lease duration.
const partitionLength = 30 * time.Second

// replica is a controller process with leader election on.
type replica struct {
	name string
	proc *proc.Process
}

// startReplica starts a leader-elected controller on the scenario's Lease, with more
// flags, killed when the test ends if it still runs then.
func (s *scenario) startReplica(name, kubeconfig, lease string, args ...string) *replica {
	s.t.Helper()
	args = append([]string{"--kubeconfig=" + kubeconfig, "--bind-address=", "-v=4",
		"--leader-elect=true", "--leader-elect-resource-namespace=" + s.ns, "--leader-elect-resource-name=" + lease}, args...)
	p, err := proc.Start("replica "+name, filepath.Join(s.t.TempDir(), name+".log"), controllerPath, args...)
	s.must(err)
	r := &replica{name: name, proc: p}
	keepLogOnFailure(s.t, env, "replica-"+name, p)
	s.t.Cleanup(func() {
		if s.t.Failed() {
			s.t.Logf("replica %s log tail:\n%s", name, p.LogTail(40))
		}
		_ = p.Kill()
	})
	return r
}

// waitLog waits for a line of the replica's log that matches the pattern, and returns
// the pattern's first group.
func (r *replica) waitLog(s *scenario, pattern string) string {
	s.t.Helper()
	re := regexp.MustCompile(pattern)
	var m [][]byte
	s.eventually(fmt.Sprintf("replica %s to log %q", r.name, pattern), func() bool {
		log, err := os.ReadFile(r.proc.LogPath())
		m = re.FindSubmatch(log)
		return err == nil && m != nil
	})
	if len(m) < 2 {
		return ""
	}
	return string(m[1])
}

// identity is the replica's holder identity in the Lease.
func (r *replica) identity(s *scenario) string {
	return r.waitLog(s, `"Waiting to become the leader" .*identity="([^"]+)"`)
}

// leaseHolder returns the holder of the scenario's Lease, "" if none.
func (s *scenario) leaseHolder(lease string) string {
	l, err := s.client.CoordinationV1().Leases(s.ns).Get(context.Background(), lease, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// waitLeader waits until the replica holds the Lease.
func (s *scenario) waitLeader(lease string, r *replica, timeout time.Duration) {
	s.t.Helper()
	id := r.identity(s)
	s.eventuallyWithin(timeout, fmt.Sprintf("replica %s to hold lease %s", r.name, lease), func() bool {
		return s.leaseHolder(lease) == id
	})
}

// TestLeaderPartition runs two replicas with the default lease settings; the leader
// talks to the API server through a proxy. While pods move, the proxy cuts the
// leader's connections and refuses new ones for 30 s, then lets them through again,
// and the pods move once more. The standby must take over and converge during the
// partition; the old leader, whose view stopped at the cut, must write nothing after
// it, not even once connections work again; the invariant checker must find nothing.
func TestLeaderPartition(t *testing.T) {
	const lease = "partition"
	startChecker(t, env)
	proxy, proxyKubeconfig := startProxy(t, env)
	s := newScenario(t, scenarioOptions{nodes: 3, noController: true})
	directKubeconfig := filepath.Join(t.TempDir(), "admin.kubeconfig")
	s.must(env.WriteAdminKubeconfig(directKubeconfig))

	a := s.startReplica("a", proxyKubeconfig, lease)
	s.waitLeader(lease, a, waitTimeout)
	b := s.startReplica("b", directKubeconfig, lease)
	// The scenario's clean-up waits for b to detach everything, then stops it.
	s.ctrl = b.proc
	b.waitLog(s, `"Another replica leads"`)
	f := newFleet(s, 4, 1)
	f.waitConverged(waitTimeout)

	// The partition begins as soon as the leader has started on a move.
	before := proxy.Count()
	f.move()
	s.eventually("the leader to write after the move", func() bool { return proxy.Count() > before })
	cut := proxy.Partition()
	restore := cut.Add(partitionLength)
	f.move()
	s.waitLeader(lease, b, partitionLength)
	tookOver := time.Since(cut)
	took := f.waitConverged(time.Until(restore))
	t.Logf("partition at %s: %s took the lease %s later; round %d converged %s after that",
		cut.Format(time.StampMilli), b.name, tookOver.Round(time.Millisecond), f.round, took.Round(time.Millisecond))
	select {
	case <-a.proc.Done():
		t.Logf("old leader exited %s into the partition: %v", time.Since(cut).Round(time.Millisecond), a.proc.Err())
	case <-time.After(time.Until(restore)):
		t.Log("old leader still runs at the end of the partition")
	}
	time.Sleep(time.Until(restore))
	proxy.Restore()
	t.Logf("connections restored at %s", time.Now().Format(time.StampMilli))

	// The old leader, if it still runs, sees the world again: one more round.
	f.move()
	f.waitConverged(waitTimeout)
	f.deleteAll()
	f.waitConverged(waitTimeout)

	var late []string
	for _, w := range proxy.Writes() {
		if w.Reached() && !w.Forwarded.Before(cut) {
			late = append(late, fmt.Sprintf("%s at %s", w, w.Forwarded.Format(time.StampMilli)))
		}
	}
	if len(late) > 0 {
		t.Errorf("the old leader wrote after the partition began at %s:\n%s", cut.Format(time.StampMilli), strings.Join(late, "\n"))
	}
	if a.proc.Running() {
		t.Logf("old leader still runs after the partition; its log tail:\n%s", a.proc.LogTail(20))
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
	startChecker(t, env)
	proxy, proxyKubeconfig := startProxy(t, env)
	s := newScenario(t, scenarioOptions{nodes: 3, noController: true})
	directKubeconfig := filepath.Join(t.TempDir(), "admin.kubeconfig")
	s.must(env.WriteAdminKubeconfig(directKubeconfig))

	a := s.startReplica("a", proxyKubeconfig, lease, shortLeaseArgs...)
	s.waitLeader(lease, a, waitTimeout)
	b := s.startReplica("b", directKubeconfig, lease, shortLeaseArgs...)
	s.ctrl = b.proc
	b.waitLog(s, `"Another replica leads"`)
	f := newFleet(s, 4, 1)
	f.waitConverged(waitTimeout)

	proxy.SetFaults(killproxy.When(isLeaseRequest, killproxy.Rule(func(*http.Request) killproxy.Fault { return killproxy.ResetConnection })))
	cut := time.Now()
	// Pods move every half second until the standby leads and the old leader has
	// exited, so that there is work for both.
	bID := b.identity(s)
	var tookOver time.Time
	for tookOver.IsZero() || a.proc.Running() {
		if time.Since(cut) > waitTimeout {
			t.Fatalf("%s after the Lease requests began to fail: standby leads: %t, old leader runs: %t", waitTimeout, !tookOver.IsZero(), a.proc.Running())
		}
		f.move()
		for next := time.Now().Add(500 * time.Millisecond); time.Now().Before(next); time.Sleep(pollEvery) {
			if tookOver.IsZero() && s.leaseHolder(lease) == bID {
				tookOver = time.Now()
			}
		}
	}
	t.Logf("Lease requests of %s failing from %s; %s seen leading %s later; %s exited %s later: %v",
		a.name, cut.Format(time.StampMilli), b.name, tookOver.Sub(cut).Round(time.Millisecond),
		a.name, time.Since(cut).Round(time.Millisecond), a.proc.Err())
	f.waitConverged(waitTimeout)
	f.deleteAll()
	f.waitConverged(waitTimeout)

	var late []string
	for _, w := range proxy.Writes() {
		if w.Reached() && w.Info.Resource != "leases" && !w.Forwarded.Before(tookOver) {
			late = append(late, fmt.Sprintf("%s at %s", w, w.Forwarded.Format(time.StampMilli)))
		}
	}
	if len(late) > 0 {
		t.Errorf("the old leader wrote after %s was seen leading at %s:\n%s", b.name, tookOver.Format(time.StampMilli), strings.Join(late, "\n"))
	}
}
