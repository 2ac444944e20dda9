package e2e

import (
	"strings"
	"testing"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
	"github.com/attachdetach-controller/attachdetach-controller/internal/localcluster/demo"
	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
)

// TestDemo plays hack/run.sh's demo to the end on hollow nodes, so that it cannot rot.
func TestDemo(t *testing.T) {
	c := newCluster(t, clusterOptions{nodes: 3, hollow: true})
	var out strings.Builder
	err := demo.Run(t.Context(), c.local, &out, demo.Options{Namespace: c.Namespace, Kubectl: env.Tool(binaries.Kubectl), StepTimeout: suite.WaitTimeout})
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	waiting := `Waiting for detach for volume "` + c.Namespace + `-data" Volume is already used by pod(s) app-1`
	for _, want := range []string{
		waiting,
		"kubelet called NodeStageVolume",
		"pod reader-3 is Running",
		"== Done",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	// kubectl's own table, not only the demo's words, shows the v1.37 text.
	_, kubectlOut, _ := strings.Cut(out.String(), "$ kubectl events --for pod/app-2 -n "+c.Namespace)
	kubectlOut, _, _ = strings.Cut(kubectlOut, "no VolumeAttachment for")
	if !strings.Contains(kubectlOut, "LAST SEEN") || !strings.Contains(kubectlOut, "FailedAttachVolume") || !strings.Contains(kubectlOut, waiting) {
		t.Errorf("the demo's kubectl events output lacks the FailedAttachVolume row %q:\n%s", waiting, kubectlOut)
	}
}
