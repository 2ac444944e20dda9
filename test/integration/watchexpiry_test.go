package integration

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/internal/killproxy"
	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
)

// expiryAPIServerFlags make every watch that resumes from a resourceVersion a few
// seconds old fail with "too old resource version": no watch cache, which would
// otherwise serve it from memory, and etcd compacted every two seconds (to the
// revision of two seconds before).
var expiryAPIServerFlags = []string{"--watch-cache=false", "--etcd-compaction-interval=2s"}

// listCounter counts the LIST requests through a proxy, by resource. Its rule injects
// no fault.
type listCounter struct {
	mu    sync.Mutex
	lists map[string]int
}

func (c *listCounter) rule(r *http.Request) killproxy.Fault {
	info := killproxy.ParseRequest(r.URL.Path)
	if r.Method == http.MethodGet && !killproxy.IsWatch(r) && info.Resource != "" && info.Name == "" {
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
// etcd compacted every two seconds, and cuts its watches every three seconds: when
// its informers resume, their resourceVersion has been compacted away, the API server
// answers "too old resource version" and they list everything again, with whatever
// changed in between arriving as one replacement. Pods keep moving meanwhile; the
// invariant checker watches, and every round converges.
func TestWatchExpiry(t *testing.T) {
	e := testenv.StartForTest(t, testenv.Options{APIServerFlags: expiryAPIServerFlags})
	startChecker(t, e)
	proxy, kubeconfig := startProxy(t, e)
	lists := &listCounter{lists: map[string]int{}}
	proxy.SetFaults(lists.rule)
	s := newScenario(t, scenarioOptions{nodes: 3, kubeconfig: kubeconfig, env: e})
	f := newFleet(s, 3, 1)
	f.waitConverged(waitTimeout)
	initial := lists.String()

	stopCuts := cutWatchesEvery(proxy, 3*time.Second)
	for range 4 {
		f.move()
		t.Logf("round %d converged in %s", f.round, f.waitConverged(waitTimeout).Round(time.Millisecond))
		// Let the watches be cut and the informers relist between rounds too.
		time.Sleep(time.Second)
	}
	cuts := stopCuts()
	f.deleteAll()
	f.waitConverged(waitTimeout)

	log, err := os.ReadFile(s.ctrl.LogPath())
	if err != nil {
		t.Fatalf("reading the controller log: %v", err)
	}
	expired := strings.Count(string(log), "too old resource version")
	t.Logf("%d watches cut, %d expired; lists at start: %s; in all: %s", cuts, expired, initial, lists)
	if expired == 0 {
		t.Error(`no watch of the controller ended with "too old resource version": the test did not exercise relisting`)
	}
}
