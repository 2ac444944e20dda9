package integration

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/internal/killproxy"
	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
)

// expiryAPIServerFlags make every watch that resumes from a resourceVersion a few
// seconds old fail with "too old": no watch cache, which would otherwise serve it
// from memory, and etcd compacted every second (to the revision of the second before).
var expiryAPIServerFlags = []string{"--watch-cache=false", "--etcd-compaction-interval=1s"}

const (
	// expiryRounds is how many times the informers are blinded and made to relist.
	expiryRounds = 3
	// watchHold is how long the proxy holds each watch that resumes from a
	// resourceVersion while the informers are blinded: long enough for etcd to be
	// compacted past it twice.
	watchHold = 3 * time.Second
)

// expiredWatch matches the controller's log line for a watch the API server refused
// to resume, without watch cache, because etcd was compacted past its
// resourceVersion; the group is the type watched.
var expiredWatch = regexp.MustCompile(`(?m)^.*type="([^"]+)".*The resourceVersion for the provided watch is too old.*$`)

// isResumedWatch tells whether a request is a watch from a resourceVersion, not one
// that starts with the current state (sendInitialEvents, the informers' watch-list).
func isResumedWatch(r *http.Request) bool {
	return killproxy.IsWatch(r) && r.URL.Query().Get("sendInitialEvents") != "true"
}

// listCounter counts the requests through a proxy that list a whole resource, by
// resource: LIST requests, and watches that begin with the current state
// (sendInitialEvents, informers' watch-list). Its rule injects no fault.
type listCounter struct {
	mu    sync.Mutex
	lists map[string]int
}

func (c *listCounter) rule(r *http.Request) killproxy.Fault {
	info := killproxy.ParseRequest(r.URL.Path)
	list := !killproxy.IsWatch(r) || r.URL.Query().Get("sendInitialEvents") == "true"
	if r.Method == http.MethodGet && list && info.Resource != "" && info.Name == "" {
		c.mu.Lock()
		c.lists[info.Resource]++
		c.mu.Unlock()
	}
	return killproxy.Fault{}
}

func (c *listCounter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(c.lists)) {
		parts = append(parts, fmt.Sprintf("%s %d", r, c.lists[r]))
	}
	return strings.Join(parts, ", ")
}

// TestWatchExpiry runs the controller against an API server without watch cache on an
// etcd compacted every second. Round after round, the proxy cuts the controller's
// watches and holds the watches that resume from where they stopped for three
// seconds, while pods move; by the time they reach the API server their
// resourceVersion has been compacted away, the API server answers "too old" and the
// informers list everything again: what changed while they were blind arrives as one
// replacement, deleted objects included. The invariant checker watches; every round
// converges.
func TestWatchExpiry(t *testing.T) {
	e := testenv.StartForTest(t, testenv.Options{APIServerFlags: expiryAPIServerFlags})
	suite.StartChecker(t, e)
	proxy, kubeconfig := startProxy(t, e)
	lists := &listCounter{lists: map[string]int{}}
	proxy.SetFaults(lists.rule)
	s := newScenario(t, scenarioOptions{SimOptions: suite.SimOptions{Nodes: 3}, kubeconfig: kubeconfig, env: e})
	f := newFleet(s, 3, 1)
	f.waitConverged(suite.WaitTimeout)
	initial := lists.String()

	blind := func(r *http.Request) killproxy.Fault {
		fault := lists.rule(r)
		if isResumedWatch(r) {
			fault = killproxy.Delayed(watchHold)
		}
		return fault
	}
	cuts := 0
	for range expiryRounds {
		proxy.SetFaults(blind)
		cuts += proxy.CutConnections(killproxy.IsWatch)
		f.move()
		time.Sleep(watchHold)
		proxy.SetFaults(lists.rule)
		t.Logf("round %d converged %s after the informers could see again", f.round, f.waitConverged(suite.WaitTimeout).Round(time.Millisecond))
	}
	f.deleteAll()
	f.waitConverged(suite.WaitTimeout)

	log, err := os.ReadFile(s.ctrl.LogFile())
	if err != nil {
		t.Fatalf("reading the controller log: %v", err)
	}
	expired := map[string]int{}
	for _, m := range expiredWatch.FindAllStringSubmatch(string(log), -1) {
		expired[m[1]]++
	}
	t.Logf("%d watches cut; expired watches by type: %v; lists at start: %s; in all: %s", cuts, expired, initial, lists)
	for _, typ := range []string{"*v1.Pod", "*v1.VolumeAttachment", "*v1.Node"} {
		if expired[typ] == 0 {
			t.Errorf("no %s watch of the controller resumed from a compacted resourceVersion: the test did not make it relist", typ)
		}
	}
}
