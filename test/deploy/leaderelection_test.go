package deploy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
	adcattachments "github.com/attachdetach-controller/attachdetach-controller/pkg/attachments"
)

// Lease timings of the fail-over rounds: the defaults (15s, 10s, 2s) shortened to
// keep the test quick, in about the same proportions.
var shortLeaseArgs = []string{
	"--leader-elect-lease-duration=4s",
	"--leader-elect-renew-deadline=3s",
	"--leader-elect-retry-period=500ms",
}

// TestFailoverRounds runs two replicas, kills the leader with SIGKILL while pods move
// between nodes, and restarts it as the new standby, again and again. The standby
// must take over and finish the moves the dead leader left pending, while no
// single-attach volume is ever attached to two nodes at once and no volume is
// detached from under a mount; only the leader may write.
func TestFailoverRounds(t *testing.T) {
	installManifests(t)
	const (
		lease   = "failover-rounds"
		rounds  = 5
		volumes = 4
	)
	w := suite.NewSimWorld(t, env.Env, suite.SimOptions{Nodes: 3, UnmountDelay: 200 * time.Millisecond, AttachDelay: 300 * time.Millisecond, DetachDelay: 300 * time.Millisecond})
	suite.StartChecker(t, env.Env)
	var replicas []*replica
	start := func() *replica {
		r := startReplica(t, fmt.Sprintf("r%d", len(replicas)), replicaOptions{account: controllerAccount, lease: lease, args: shortLeaseArgs})
		replicas = append(replicas, r)
		return r
	}
	leader := start()
	waitLeader(t, lease, leader, operationTimeout)
	standby := start()
	standby.waitStandby()

	vols := make([]workload.Volume, volumes)
	pods := make([]string, volumes)
	at := make([]int, volumes) // index of the node each volume's pod is on
	for i := range vols {
		vols[i] = w.CreateVolume(fmt.Sprintf("data-%d", i), workload.VolumeOptions{})
		at[i] = i % len(w.Nodes)
		pods[i] = fmt.Sprintf("app-%d-r0", i)
		w.CreatePod(pods[i], w.Nodes[at[i]], vols[i].Claim)
	}
	for i := range vols {
		waitAttachedOnlyTo(w, vols[i], w.Nodes[at[i]], operationTimeout)
	}

	// A takeover is a round's new leader and the VolumeAttachments only it can have
	// deleted and created: those of the pods deleted after the kill.
	type takeover struct {
		leader           *replica
		deleted, created []string
	}
	var takeovers []takeover
	for round := 1; round <= rounds; round++ {
		oldPods, oldAt := slices.Clone(pods), slices.Clone(at)
		var tk takeover
		// Every pod moves to the next node: its replacement is created there first
		// and must wait until the old pod is gone and the volume detached.
		for i := range vols {
			if i >= volumes/2 {
				tk.deleted = append(tk.deleted, attachments(w, vols[i])[w.Nodes[at[i]]].Name)
			}
			at[i] = (at[i] + 1) % len(w.Nodes)
			pods[i] = fmt.Sprintf("app-%d-r%d", i, round)
			w.CreatePod(pods[i], w.Nodes[at[i]], vols[i].Claim)
		}
		// Half of the old pods go now, and the leader dies as soon as it has begun
		// to detach their volumes; the other half go while no replica leads.
		for i := range volumes / 2 {
			w.DeletePod(oldPods[i])
		}
		suite.Eventually(t, operationTimeout, "the leader to begin a detach", func() bool {
			for i := range volumes / 2 {
				va, ok := attachments(w, vols[i])[w.Nodes[oldAt[i]]]
				if !ok || va.DeletionTimestamp != nil {
					return true
				}
			}
			return false
		})
		killed := time.Now()
		leader.kill()
		for i := volumes / 2; i < volumes; i++ {
			w.DeletePod(oldPods[i])
		}
		took := waitLeader(t, lease, standby, operationTimeout).Sub(killed)
		next := start()
		for i := range vols {
			waitAttachedOnlyTo(w, vols[i], w.Nodes[at[i]], operationTimeout)
		}
		done := time.Since(killed)
		for i := volumes / 2; i < volumes; i++ {
			tk.created = append(tk.created, attachments(w, vols[i])[w.Nodes[at[i]]].Name)
		}
		next.waitStandby()
		waitGauge(t, standby, 1)
		waitGauge(t, next, 0)
		t.Logf("round %d: leader %s killed; %s took the lease %s later; all %d pods moved %s after the kill",
			round, leader.name, standby.name, took.Round(time.Millisecond), volumes, done.Round(time.Millisecond))
		tk.leader = standby
		takeovers = append(takeovers, tk)
		leader, standby = standby, next
	}

	for i := range vols {
		w.DeletePod(pods[i])
	}
	for i := range vols {
		waitDetachedEverywhere(w, vols[i], operationTimeout)
	}
	standby.terminate()
	leader.terminate()

	requests := checkOnlyLeaderWrites(t, lease, replicas)
	for i, tk := range takeovers {
		mine := requestsOf(requests, tk.leader.credential)
		for _, name := range tk.deleted {
			if !madeRequest(mine, "delete", name) {
				t.Errorf("round %d: new leader %s did not delete VolumeAttachment %s", i+1, tk.leader.name, name)
			}
		}
		for _, name := range tk.created {
			if !madeRequest(mine, "create", name) {
				t.Errorf("round %d: new leader %s did not create VolumeAttachment %s", i+1, tk.leader.name, name)
			}
		}
	}
	checkNoRefusals(t, replicas)
}

// TestFailoverTimesWithDefaultLeaseSettings measures how long the controller is
// leaderless with the default lease settings: after SIGKILL of the leader, which
// leaves the Lease to expire, and after SIGTERM, which releases it.
func TestFailoverTimesWithDefaultLeaseSettings(t *testing.T) {
	installManifests(t)
	const (
		lease = "failover-defaults"
		// The defaults: lease duration, renew deadline, retry period.
		leaseDuration = 15 * time.Second
		retryPeriod   = 2 * time.Second
		// client-go waits between RetryPeriod and RetryPeriod*(1+1.2) between tries.
		maxRetryWait = retryPeriod * 22 / 10
		// latency allows for requests and scheduling on a busy test machine.
		latency = time.Second
	)
	w := suite.NewSimWorld(t, env.Env, suite.SimOptions{Nodes: 1, AttachDelay: 300 * time.Millisecond})
	node := w.Nodes[0]
	suite.StartChecker(t, env.Env)
	opts := replicaOptions{account: controllerAccount, lease: lease}
	a := startReplica(t, "a", opts)
	waitLeader(t, lease, a, operationTimeout)
	b := startReplica(t, "b", opts)
	b.waitStandby()

	// SIGKILL: the Lease stays held until it expires. A pod created right after
	// the kill waits for the new leader to attach its volume.
	afterKill := w.CreateVolume("after-kill", workload.VolumeOptions{})
	killed := time.Now()
	a.kill()
	if holder := leaseHolder(t, lease); holder != a.ctrl.Identity() {
		t.Errorf("right after SIGKILL the lease is held by %q, want the killed leader %q", holder, a.ctrl.Identity())
	}
	w.CreatePod("after-kill", node, afterKill.Claim)
	waitLeader(t, lease, b, leaseDuration+maxRetryWait+operationTimeout)
	waitAttachedOnlyTo(w, afterKill, node, operationTimeout)
	killAttached := time.Since(killed)

	// SIGTERM: the leader releases the Lease on its way out and the standby takes it
	// at its next try.
	a2 := startReplica(t, "a2", opts)
	a2.waitStandby()
	afterTerm := w.CreateVolume("after-term", workload.VolumeOptions{})
	stopped := time.Now()
	b.terminate()
	exited := time.Since(stopped)
	if holder := leaseHolder(t, lease); holder != "" && holder != a2.ctrl.Identity() {
		t.Errorf("after SIGTERM the stopped leader's lease is held by %q, want it released", holder)
	}
	w.CreatePod("after-term", node, afterTerm.Claim)
	waitLeader(t, lease, a2, leaseDuration)
	waitAttachedOnlyTo(w, afterTerm, node, operationTimeout)
	termAttached := time.Since(stopped)
	a2.terminate()

	requests := checkOnlyLeaderWrites(t, lease, []*replica{a, b, a2})
	killLease, killWrite := takeoverTimes(t, requests, b, lease, killed)
	termLease, termWrite := takeoverTimes(t, requests, a2, lease, stopped)
	t.Logf("default lease settings, SIGKILL of the leader: lease taken over after %s, first write after %s, pending attach done after %s",
		killLease.Round(time.Millisecond), killWrite.Round(time.Millisecond), killAttached.Round(time.Millisecond))
	t.Logf("default lease settings, SIGTERM of the leader: exited after %s, lease taken over after %s, first write after %s, pending attach done after %s",
		exited.Round(time.Millisecond), termLease.Round(time.Millisecond), termWrite.Round(time.Millisecond), termAttached.Round(time.Millisecond))
	// The standby sees the last renewal at its first try after it, and takes the
	// Lease at its first try once the lease duration has passed since then.
	if limit := leaseDuration + 2*maxRetryWait + latency; killLease > limit {
		t.Errorf("after SIGKILL the lease was taken over after %s, want at most %s", killLease, limit)
	}
	// A released Lease is taken at the standby's next try, before an unreleased one
	// could even have expired.
	if limit := exited + maxRetryWait + latency; termLease > limit {
		t.Errorf("after SIGTERM the lease was taken over after %s, want at most %s", termLease, limit)
	}
	checkNoRefusals(t, []*replica{a, b, a2})
}

// waitGauge waits until the replica's leader metric has the value.
func waitGauge(t *testing.T, r *replica, want float64) {
	t.Helper()
	suite.Eventually(t, 5*time.Second, fmt.Sprintf("%s of replica %s to be %v", leaderMetric, r.name, want), func() bool {
		return r.leaderGauge() == want
	})
}

// leaseAcquired returns when the replica took the Lease, from its requests: its
// first successful write of the Lease, as a standby never writes it.
func leaseAcquired(requests []request, lease string) (time.Time, bool) {
	for _, r := range requests {
		if r.permission.Resource == "leases" && r.name == lease && r.isWrite() && r.code/100 == 2 {
			return r.received, true
		}
	}
	return time.Time{}, false
}

// checkOnlyLeaderWrites checks in the audit log that each replica wrote nothing but
// the Lease outside the time it led: from its taking the Lease to the next replica's
// taking it. It returns the replicas' requests.
func checkOnlyLeaderWrites(t *testing.T, lease string, replicas []*replica) []request {
	t.Helper()
	all, err := auditedRequests()
	if err != nil {
		t.Fatal(err)
	}
	// A term is a replica's time as the leader; a process leads at most once.
	type term struct {
		r      *replica
		from   time.Time
		writes int
	}
	var terms []*term
	var credentials []string
	for _, r := range replicas {
		credentials = append(credentials, r.credential)
		if from, ok := leaseAcquired(requestsOf(all, r.credential), lease); ok {
			terms = append(terms, &term{r: r, from: from})
		}
	}
	slices.SortFunc(terms, func(a, b *term) int { return a.from.Compare(b.from) })
	for _, r := range replicas {
		i := slices.IndexFunc(terms, func(tm *term) bool { return tm.r == r })
		for _, req := range requestsOf(all, r.credential) {
			if !req.isWrite() || req.permission.Resource == "leases" {
				continue
			}
			switch {
			case i < 0:
				t.Errorf("replica %s never led, yet wrote: %s", r.name, req)
			case req.received.Before(terms[i].from):
				t.Errorf("replica %s wrote before it took the lease at %s: %s", r.name, terms[i].from.Format(time.StampMicro), req)
			case i+1 < len(terms) && !req.received.Before(terms[i+1].from):
				t.Errorf("replica %s wrote after %s took the lease at %s: %s", r.name, terms[i+1].r.name, terms[i+1].from.Format(time.StampMicro), req)
			default:
				terms[i].writes++
			}
		}
	}
	var leaders []string
	for _, tm := range terms {
		leaders = append(leaders, fmt.Sprintf("%s (%d writes)", tm.r.name, tm.writes))
	}
	t.Logf("leaders in turn: %s", strings.Join(leaders, ", "))
	return requestsOf(all, credentials...)
}

// takeoverTimes returns how long after since the replica took the Lease and made its
// first write of an attach or detach: neither the Lease nor the cache probe.
func takeoverTimes(t *testing.T, requests []request, r *replica, lease string, since time.Time) (leaseTaken, firstWrite time.Duration) {
	t.Helper()
	mine := requestsOf(requests, r.credential)
	acquired, ok := leaseAcquired(mine, lease)
	if !ok {
		t.Fatalf("replica %s never took the lease", r.name)
	}
	i := slices.IndexFunc(mine, func(req request) bool {
		return req.isWrite() && req.permission.Resource != "leases" && req.name != adcattachments.CacheProbe
	})
	if i < 0 {
		t.Fatalf("replica %s never wrote anything", r.name)
	}
	return acquired.Sub(since), mine[i].received.Sub(since)
}

// madeRequest tells whether a request with the verb on a VolumeAttachment of that
// name succeeded.
func madeRequest(requests []request, verb, name string) bool {
	return slices.ContainsFunc(requests, func(r request) bool {
		return r.permission.Resource == "volumeattachments" && r.verb == verb && r.name == name && r.code/100 == 2
	})
}

// checkNoRefusals checks the replicas' logs report no request refused for lack of
// permission.
func checkNoRefusals(t *testing.T, replicas []*replica) {
	t.Helper()
	for _, r := range replicas {
		if lines := r.forbidden(); len(lines) > 0 {
			t.Errorf("replica %s was refused requests:\n%s", r.name, strings.Join(lines, "\n"))
		}
	}
}
