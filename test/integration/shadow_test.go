package integration

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/internal/controllerproc"
	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
)

// shadowComparisons reads attachdetach_controller_shadow_comparisons_total from
// the controller's /metrics, by "expected/result".
func shadowComparisons(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, m := range scrapeFamilies(t, addr)["attachdetach_controller_shadow_comparisons_total"].GetMetric() {
		out[label(m, "expected")+"/"+label(m, "result")] = m.GetCounter().GetValue()
	}
	return out
}

// TestShadowBesideKubeControllerManager runs the controller in shadow mode beside
// the real kube-controller-manager v1.37.1's attach/detach loop: on attaches, a
// move and detaches the two agree on every decision, and the controller writes
// nothing; with a wait for unmount shorter than kube-controller-manager's fixed 6
// minutes, a volume left mounted on a node that is not Ready is a disagreement.
func TestShadowBesideKubeControllerManager(t *testing.T) {
	s := newScenario(t, scenarioOptions{noController: true, SimOptions: suite.SimOptions{UnmountDelay: 300 * time.Millisecond}})
	a, b := s.Nodes[0], s.Nodes[1]
	kcm := startKCM(t, env.AdminKubeconfig, filepath.Join(t.TempDir(), "kube-controller-manager.log"),
		"--controllers=persistentvolume-attach-detach-controller", "--leader-elect=false")
	shadowLog := filepath.Join(t.TempDir(), "shadow.log")
	suite.KeepLogOnFailure(t, env.Env, "shadow", shadowLog)
	shadow, err := controllerproc.New(t.Context(), controllerproc.Options{
		Binary: env.Controller, Kubeconfig: env.AdminKubeconfig, LogFile: shadowLog, HTTPEndpoint: "127.0.0.1:0",
		Args: []string{"--shadow", "--shadow-grace=3s", "--max-wait-for-unmount=1s"},
	})
	s.Must(err)
	s.Must(shadow.Start(t.Context()))
	s.Must(shadow.WaitReady(t.Context()))
	var addr string
	s.Eventually("the shadow controller's HTTP address", func() bool {
		addr = shadow.HTTPAddress()
		return addr != ""
	})

	// An ordinary workload, done by kube-controller-manager.
	kept := s.kcmAttachedVolume("kept", "keeper", a)
	moved := s.kcmAttachedVolume("moved", "mover", a)
	s.DeletePod("mover")
	s.CreatePod("mover-b", b, moved.Claim)
	s.kcmWaitAttached(moved, b)
	dropped := s.kcmAttachedVolume("dropped", "dropper", b)
	s.DeletePod("dropper")
	s.WaitDetached(dropped, b)
	var got map[string]float64
	s.Eventually("every decision compared, all agreeing", func() bool {
		got = shadowComparisons(t, addr)
		return got["attached/agree"] >= 3 && got["detached/agree"] >= 1
	})
	t.Logf("shadow comparisons after the ordinary workload: %v", got)
	time.Sleep(4 * time.Second)
	for k, v := range shadowComparisons(t, addr) {
		if strings.HasSuffix(k, "/disagree") && v > 0 {
			t.Errorf("shadow comparisons %s = %v on an ordinary workload, want none:\n%s", k, v, shadow.LogTail(30))
		}
	}
	if log, err := shadow.Log(); err != nil || strings.Contains(log, "read-only client: refusing") {
		t.Errorf("the shadow controller tried to write (or its log cannot be read: %v)", err)
	}

	// Provoked: kept stays mounted on a NotReady node; this controller would
	// force-detach after 1 s, kube-controller-manager waits 6 minutes.
	s.Must(s.Kubelet.SetStuck(a, kept.UniqueName(), true))
	s.DeletePodNow("keeper")
	s.Must(s.Kubelet.SetReady(t.Context(), a, false))
	s.Eventually("the disagreement on the shorter wait for unmount", func() bool {
		return shadowComparisons(t, addr)["detached/disagree"] >= 1
	})
	// The comparison is counted before its log line, explained outside the
	// comparer's lock, is written.
	var log string
	s.Eventually("the log line for the disagreement", func() bool {
		log, err = shadow.Log()
		return err == nil && strings.Contains(log, "Shadow disagreement")
	})
	for _, want := range []string{"Shadow disagreement", "force-detached", "volume " + kept.PV + " (", "node status: "} {
		if !strings.Contains(log, want) {
			t.Errorf("no %q in the log line for the disagreement, which carries the explanation:\n%s", want, shadow.LogTail(20))
		}
	}

	// Hand the cluster back to an acting controller for the clean-up.
	s.Must(shadow.Stop())
	s.Must(kcm.Stop(10 * time.Second))
	s.Must(s.Kubelet.SetStuck(a, kept.UniqueName(), false))
	s.Must(s.Kubelet.SetReady(t.Context(), a, true))
}
