package integration

import (
	"flag"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/internal/killproxy"
	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
)

var faultSeed = flag.Uint64("fault-seed", 0, "seed of the random faults of TestFaultsOnControllerRequests (0: from the clock)")

const (
	// faultRounds is how many rounds of moves run under faults.
	faultRounds = 3
	// faultRoundTimeout allows for the controller's backoff after failed operations.
	faultRoundTimeout = 60 * time.Second
	// faultsInARow bounds the faults one object's requests of one kind meet in a
	// row. A detach sends a node status patch and a delete, a failed one puts
	// the volume back in node status, and about a third of writes fail: without a
	// bound, about half the attempts of a detach failed, the controller's backoff
	// (0.5 s, doubling) after each grew past the round's minute after seven in a
	// row, and 6 of 54 rounds took over 15 s (37 s the longest). With it, 2 of 45
	// did (17 s the longest): the faults test progress under faults, not an
	// outage.
	faultsInARow = 2
)

// controllerFaults is the mix of faults injected into the controller's requests: a
// write is failed before the API server sees it (500, or 429 with Retry-After, which
// client-go waits out and retries), delayed, lost with its connection, or made and
// its response lost; a read is delayed or loses its connection. Watches are cut on a
// timer instead. No object's requests of one kind fail more than twice in a row
// (faultsInARow).
func controllerFaults(seed uint64) killproxy.Rule {
	writes := killproxy.Random(seed,
		killproxy.Weighted{Fault: killproxy.Fault{}, Weight: 55},
		killproxy.Weighted{Fault: killproxy.Fail500, Weight: 10},
		killproxy.Weighted{Fault: killproxy.Throttle, Weight: 5},
		killproxy.Weighted{Fault: killproxy.DropResponse, Weight: 12},
		killproxy.Weighted{Fault: killproxy.ResetConnection, Weight: 8},
		killproxy.Weighted{Fault: killproxy.Delayed(300 * time.Millisecond), Weight: 7},
		killproxy.Weighted{Fault: killproxy.Fault{Delay: 300 * time.Millisecond, Drop: true}, Weight: 3},
	)
	reads := killproxy.Random(seed+1,
		killproxy.Weighted{Fault: killproxy.Fault{}, Weight: 88},
		killproxy.Weighted{Fault: killproxy.Delayed(200 * time.Millisecond), Weight: 6},
		killproxy.Weighted{Fault: killproxy.ResetConnection, Weight: 6},
	)
	return killproxy.AtMostInARow(faultsInARow, func(r *http.Request) killproxy.Fault {
		switch {
		case killproxy.IsWrite(r):
			return writes(r)
		case killproxy.IsWatch(r):
			return killproxy.Fault{}
		default:
			return reads(r)
		}
	})
}

// TestFaultsOnControllerRequests moves four single-attach and one ReadWriteMany volume
// between three nodes while a proxy between the controller and the API server injects
// faults into the controller's requests (controllerFaults) and cuts its watches every
// two seconds. The invariant checker watches throughout: no single-attach volume on
// two nodes, no detach from under a mount. Every round must converge despite the
// faults, and a last round after them.
func TestFaultsOnControllerRequests(t *testing.T) {
	seed := *faultSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("fault seed %d (run again with -args -fault-seed=%d; the order of requests still varies)", seed, seed)
	suite.StartChecker(t, env.Env)
	proxy, kubeconfig := startProxy(t, env.Env)
	s := newScenario(t, scenarioOptions{SimOptions: suite.SimOptions{Nodes: 3}, kubeconfig: kubeconfig})
	f := newFleet(s, 4, 1)
	f.waitConverged(suite.WaitTimeout)

	proxy.Reset()
	proxy.SetFaults(controllerFaults(seed))
	stopCuts := cutWatchesEvery(proxy, 2*time.Second)
	for range faultRounds {
		f.move()
		t.Logf("round %d converged under faults in %s", f.round, f.waitConverged(faultRoundTimeout).Round(time.Millisecond))
	}
	cuts := stopCuts()
	proxy.SetFaults(nil)
	writes := proxy.Writes()

	f.move()
	t.Logf("round %d converged after the faults in %s", f.round, f.waitConverged(suite.WaitTimeout).Round(time.Millisecond))
	f.deleteAll()
	f.waitConverged(suite.WaitTimeout)

	tally := map[string]int{}
	for _, w := range writes {
		tally[fmt.Sprintf("%s (%s)", w.Outcome, w.Fault)]++
	}
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(tally)) {
		lines = append(lines, fmt.Sprintf("%4d %s", tally[k], k))
	}
	t.Logf("%d writes under faults, %d watches cut:\n%s", len(writes), cuts, strings.Join(lines, "\n"))
	for _, want := range []killproxy.Outcome{killproxy.Failed, killproxy.Dropped, killproxy.ConnReset} {
		if !slices.ContainsFunc(writes, func(w killproxy.Write) bool { return w.Outcome == want }) {
			t.Errorf("no write was %s: the faults were not exercised", want)
		}
	}
	if cuts == 0 {
		t.Error("no watch was cut")
	}
}
