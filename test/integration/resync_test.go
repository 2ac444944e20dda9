package integration

import (
	"testing"
	"time"
)

// queueAdds reads workqueue_adds_total of the named queue from the controller's
// /metrics.
func queueAdds(t *testing.T, addr, queue string) float64 {
	t.Helper()
	for _, m := range scrapeFamilies(t, addr)["workqueue_adds_total"].GetMetric() {
		if label(m, "name") == queue {
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// TestPeriodicPass: with --attach-detach-reconcile-sync-period=1s the safety pass
// re-evaluates every pod each second; --disable-attach-detach-reconcile-sync
// turns it off, and nothing is re-evaluated while nothing changes.
func TestPeriodicPass(t *testing.T) {
	const window = 4500 * time.Millisecond
	for _, tc := range []struct {
		name     string
		disabled bool
	}{
		{name: "every second"},
		{name: "disabled", disabled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"--http-endpoint=127.0.0.1:0", "--attach-detach-reconcile-sync-period=1s"}
			if tc.disabled {
				args = append(args, "--disable-attach-detach-reconcile-sync")
			}
			s := newScenario(t, scenarioOptions{controllerArgs: args})
			s.AttachedVolume("data", "app", s.Nodes[0])
			s.WaitPodRunning("app")
			s.Eventually("the controller serving /metrics", func() bool { return s.ctrl.HTTPAddress() != "" })
			time.Sleep(time.Second)
			before := queueAdds(t, s.ctrl.HTTPAddress(), "pods")
			time.Sleep(window)
			added := queueAdds(t, s.ctrl.HTTPAddress(), "pods") - before
			t.Logf("pods queued in %s: %v", window, added)
			switch {
			case tc.disabled && added != 0:
				t.Errorf("pods queued %v times in %s with the periodic pass disabled and nothing changing, want 0", added, window)
			case !tc.disabled && added < 3:
				t.Errorf("pods queued %v times in %s with a pass every second, want at least 3", added, window)
			}
		})
	}
}
