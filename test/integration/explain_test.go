package integration

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/explain"
)

// explainCmd runs `attachdetach-controller explain` with the admin's kubeconfig
// and returns its standard output.
func (s *scenario) explainCmd(args ...string) string {
	s.T.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(s.T.Context(), env.Controller, append([]string{"explain", "--kubeconfig=" + env.AdminKubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		s.T.Fatalf("explain %v: %v\n%s", args, err, stderr.String())
	}
	return stdout.String()
}

// waitExplained waits until the explanation of target contains want.
func (s *scenario) waitExplained(want string, args ...string) string {
	s.T.Helper()
	var out string
	s.Eventually("explain "+strings.Join(args, " ")+" saying "+want, func() bool {
		out = s.explainCmd(args...)
		return strings.Contains(out, want)
	})
	return out
}

// TestExplainReasons: for each reason a volume waits, explain says it in words,
// read from the cluster with the caller's credentials by the controller's own
// rules, or asked of the leader, which also knows its backoffs; also as JSON, and
// through the real kubectl as the plugin kubectl-attachdetach.
func TestExplainReasons(t *testing.T) {
	s := newScenario(t, scenarioOptions{controllerArgs: []string{"--http-endpoint=0.0.0.0:0"}})
	a, b := s.Nodes[0], s.Nodes[1]
	ns := s.Namespace
	var leader string
	s.Eventually("the controller's HTTP address in its log", func() bool {
		leader = s.ctrl.HTTPAddress()
		return leader != ""
	})
	_, port, err := net.SplitHostPort(leader)
	s.Must(err)
	fromLeader := []string{"--from-leader", "--leader-url=http://127.0.0.1:" + port}

	held := s.AttachedVolume("held", "first", a)
	s.CreatePod("second", b, held.Claim)
	s.waitExplained("a single-attach volume: held by "+a+" for pod(s) "+ns+"/first: waits for them to go", "pod/second", "-n", ns)

	stuck := s.AttachedVolume("stuck", "stuck-user", b)
	s.Must(s.Kubelet.SetStuck(b, stuck.UniqueName(), true))
	s.DeletePodNow("stuck-user")
	s.Must(s.Kubelet.SetReady(t.Context(), b, false))
	// A snapshot cannot know when the controller's wait for unmount began; the
	// leader can, and counts down to the force detach.
	s.waitExplained("mounted on "+b+" (volumesInUse); waiting for kubelet to unmount it; "+b+
		" is NotReady; force detach 6m0s after the wait began if it is not Ready then (when the wait began is known only to the leader: --from-leader)", "pv/"+stuck.PV)
	countdown := regexp.MustCompile(`mounted on ` + regexp.QuoteMeta(b) + ` \(volumesInUse\); waiting for kubelet to unmount it since \d\d:\d\d:\d\d; ` +
		regexp.QuoteMeta(b) + ` is NotReady; force detach at \d\d:\d\d:\d\d if it is not Ready then, in (\d+m)?\d+s`)
	s.Eventually("the leader's countdown to the force detach", func() bool {
		return countdown.MatchString(s.explainCmd(append(fromLeader, "pv/"+stuck.PV)...))
	})
	// A snapshot applies the detach policy given to it, as the controller does;
	// the same rules answer for the volume's node and its VolumeAttachment.
	never := s.explainCmd("--max-wait-for-unmount-per-driver="+s.Driver+"=never", "pv/"+stuck.PV)
	for _, want := range []string{
		"detach policy: --max-wait-for-unmount=6m0s --max-wait-for-unmount-per-driver=" + s.Driver + "=never\n",
		"waiting for kubelet to unmount it; force detach on timeout is off (policy of " + s.Driver + ")",
	} {
		if !strings.Contains(never, want) {
			t.Errorf("explain with a never policy lacks %q:\n%s", want, never)
		}
	}
	for _, target := range []string{"node/" + b, "volumeattachment/" + stuck.AttachmentName(b)} {
		if out := s.explainCmd(target); !strings.Contains(out, "volume "+stuck.PV) || !strings.Contains(out, "mounted on "+b+" (volumesInUse)") {
			t.Errorf("explain %s does not explain the stuck volume:\n%s", target, out)
		}
	}

	failing := s.CreateVolume("failing", workload.VolumeOptions{})
	s.Attacher.FailAttach(failing.Handle, "rpc error: code = Internal desc = disk is busy")
	s.CreatePod("failing-user", a, failing.Claim)
	s.waitExplained("the CSI driver reported: rpc error: code = Internal desc = disk is busy", "pod/failing-user", "-n", ns)
	// Only the leader knows its backoff after the failed attaches.
	s.waitExplained("the last attach failed: the next may start in", append(fromLeader, "pod/failing-user", "-n", ns)...)
	if out := s.explainCmd(append(fromLeader, "pod/second", "-n", ns)...); !strings.Contains(out, "as the leader saw it") || !strings.Contains(out, "held by "+a) {
		t.Errorf("explain --from-leader pod/second:\n%s", out)
	}
	t.Run("leader found through its Lease and asked through a port-forward", func(t *testing.T) {
		leaderPod(t, s, ns, "adc-leader")
		// The pod is an object only, on no node: no kubelet can forward its port,
		// so explain says why and reads the cluster instead.
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(t.Context(), env.Controller, "explain", "--kubeconfig="+env.AdminKubeconfig,
			"--from-leader", "--leader-port="+port, "--leader-elect-resource-namespace="+ns, "pod/failing-user", "-n", ns)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("explain: %v\n%s", err, stderr.String())
		}
		if want := "port-forward to pod " + ns + "/adc-leader"; !strings.Contains(stderr.String(), want) {
			t.Errorf("explain's standard error does not say %q:\n%s", want, stderr.String())
		}
		if !strings.Contains(stdout.String(), "as the snapshot saw it") {
			t.Errorf("explain did not fall back to a snapshot:\n%s", stdout.String())
		}
	})
	s.Attacher.ClearFailures(failing.Handle)

	unbound := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unbound"},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	_, err = s.Client.CoreV1().PersistentVolumeClaims(ns).Create(t.Context(), unbound, metav1.CreateOptions{})
	s.Must(err)
	s.CreatePod("unbound-user", a, "unbound")
	s.waitExplained("claim "+ns+"/unbound is not bound", "pod/unbound-user", "-n", ns)
	s.waitExplained("unbound: the claim is not bound", "pvc/unbound", "-n", ns)
	if out := s.explainCmd("pvc/"+held.Claim, "-n", ns); !strings.Contains(out, "held by "+a+" for pod(s) "+ns+"/first") {
		t.Errorf("explain pvc/%s:\n%s", held.Claim, out)
	}

	unmanaged := "unmanaged-" + ns
	_, err = s.Client.CoreV1().Nodes().Create(t.Context(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: unmanaged}}, metav1.CreateOptions{})
	s.Must(err)
	t.Cleanup(func() { _ = s.Client.CoreV1().Nodes().Delete(context.Background(), unmanaged, metav1.DeleteOptions{}) })
	elsewhere := s.CreateVolume("elsewhere", workload.VolumeOptions{})
	s.CreatePod("elsewhere-user", unmanaged, elsewhere.Claim)
	s.waitExplained("node "+unmanaged+" is not managed by the attach/detach controller", "pod/elsewhere-user", "-n", ns)
	s.DeletePodNow("elsewhere-user")

	for _, format := range []string{"json", "yaml"} {
		var report explain.Report
		s.Must(yaml.Unmarshal([]byte(s.explainCmd("pod/second", "-n", ns, "-o", format)), &report))
		if len(report.Volumes) != 1 || len(report.Volumes[0].Nodes) != 2 || report.Volumes[0].Nodes[1].Node != b || report.Volumes[0].Nodes[1].Action != "wait" {
			t.Errorf("%s report = %+v, want the volume waiting on %s", format, report, b)
		}
	}

	// The same answer through the real kubectl, with the binary installed as a plugin.
	plugins := t.TempDir()
	s.Must(os.Symlink(env.Controller, filepath.Join(plugins, "kubectl-attachdetach")))
	kubectl := exec.CommandContext(t.Context(), env.Tool(binaries.Kubectl), "attachdetach", "explain", "pod/second", "-n", ns)
	kubectl.Env = append(os.Environ(), "KUBECONFIG="+env.AdminKubeconfig, "PATH="+plugins+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := kubectl.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "held by "+a) {
		t.Errorf("kubectl attachdetach explain: %v\n%s", err, out)
	}
	t.Logf("kubectl attachdetach explain pod/second -n %s:\n%s", ns, out)

	// Last, as it changes every volume of the driver: a CSIDriver that needs no attaching.
	s.Must(s.Kubelet.SetStuck(b, stuck.UniqueName(), false))
	s.Must(s.Kubelet.SetReady(t.Context(), b, true))
	_, err = s.Client.StorageV1().CSIDrivers().Create(t.Context(), &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: s.Driver},
		Spec:       storagev1.CSIDriverSpec{AttachRequired: ptr.To(false)},
	}, metav1.CreateOptions{})
	s.Must(err)
	t.Cleanup(func() {
		_ = s.Client.StorageV1().CSIDrivers().Delete(context.Background(), s.Driver, metav1.DeleteOptions{})
	})
	s.waitExplained("needs no attaching: CSIDriver "+s.Driver+" says attachRequired: false", "pod/first", "-n", ns)
}

// leaderPod makes a leader pod as the Deployment runs it: a Pod named by the
// leader Lease's holder.
func leaderPod(t *testing.T, s *scenario, ns, name string) {
	t.Helper()
	_, err := s.Client.CoreV1().Pods(ns).Create(t.Context(), &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "controller", Image: "attachdetach-controller"}}},
	}, metav1.CreateOptions{})
	s.Must(err)
	_, err = s.Client.CoordinationV1().Leases(ns).Create(t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "attachdetach-controller"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name + "_0f6c2d9e")},
	}, metav1.CreateOptions{})
	s.Must(err)
}
