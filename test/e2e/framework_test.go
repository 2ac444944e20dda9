package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/klog/v2/ktesting"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
	"github.com/attachdetach-controller/attachdetach-controller/internal/controllerproc"
	"github.com/attachdetach-controller/attachdetach-controller/internal/csidriver"
	"github.com/attachdetach-controller/attachdetach-controller/internal/localcluster"
	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

// cluster is one test's world on the package's control plane: its own CSI driver
// name, nodes, namespace, csi-attacher, kubelet stand-in and controller.
type cluster struct {
	*suite.World
	local *localcluster.Cluster
}

type clusterOptions struct {
	nodes        int
	unmountDelay time.Duration
	// hollow runs the nodes with the real kubelet instead of the stand-in.
	hollow bool
	// controllerArgs are more flags for the controller.
	controllerArgs []string
	// nodeMonitorGracePeriod, if set, runs kube-controller-manager's node lifecycle
	// controller with it.
	nodeMonitorGracePeriod time.Duration
}

// Hollow kubelets' timing in the suite: node status every 2s instead of 10s (kubelet
// mounts a volume only once a status write has listed it in volumesInUse, so this is
// how long each mount waits), and an 8s lease renewed every 2s, which a 10s
// node-monitor grace period of the node lifecycle controller tolerates.
const (
	hollowStatusPeriod  = 2 * time.Second
	hollowLeaseDuration = 8 * time.Second
)

func newCluster(t *testing.T, opts clusterOptions) *cluster {
	t.Helper()
	if opts.nodes == 0 {
		opts.nodes = 2
	}
	_, ctx := ktesting.NewTestContext(t)
	if opts.hollow {
		// Started first, the checker's clean-up runs last, after the cluster stopped.
		suite.StartChecker(t, env.Env)
	}
	id := rand.String(5)
	var nodes []string
	for i := range opts.nodes {
		nodes = append(nodes, fmt.Sprintf("e2e-%s-%c", id, 'a'+i))
	}
	began := time.Now()
	lc, err := localcluster.Start(ctx, localcluster.Options{
		Env:                env.Env,
		Nodes:              nodes,
		DriverName:         id + ".csi.e2e.example.com",
		UnmountDelay:       opts.unmountDelay,
		AttacherTimeout:    10 * time.Second,
		AttacherRetryStart: 100 * time.Millisecond,
		AttacherRetryMax:   2 * time.Second,
		Controller:         controllerproc.Options{Binary: env.Controller, Args: opts.controllerArgs},

		HollowNodes:               opts.hollow,
		HollowKubelet:             hollowKubelet(opts.hollow),
		NodeStatusUpdateFrequency: hollowStatusPeriod,
		NodeLeaseDuration:         hollowLeaseDuration,
		NodeMonitorGracePeriod:    opts.nodeMonitorGracePeriod,
		KubeControllerManager:     env.Tool(binaries.KubeControllerManager),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster %s up in %s", id, time.Since(began).Round(time.Millisecond))
	t.Cleanup(lc.Stop)
	c := &cluster{World: suite.NewWorld(t, lc.Client, "e2e-"+id, lc.DriverName, lc.Nodes), local: lc}
	t.Cleanup(c.cleanup)
	return c
}

// cleanup deletes the test's pods and waits for its VolumeAttachments to go while
// csi-attacher still runs, so that no finalizer is left behind for the next tests,
// and checks that the driver never refused a second node.
func (c *cluster) cleanup() {
	lc := c.local
	t := c.T
	lc.Driver.ClearFaults()
	lc.Driver.SetDelay(0)
	if !lc.Controller.Running() {
		c.Must(lc.Controller.Start(t.Context()))
	}
	c.Drain()
	if conflicts := lc.Driver.Conflicts(); len(conflicts) > 0 {
		t.Errorf("the driver refused ControllerPublishVolume of single-node volumes already published elsewhere: %+v", conflicts)
	}
	if t.Failed() {
		t.Logf("controller log tail:\n%s", lc.Controller.LogTail(80))
		t.Logf("csi-attacher log tail:\n%s", lc.Attacher.LogTail(40))
		for _, name := range lc.Nodes {
			if h := lc.Hollow[name]; h != nil {
				t.Logf("kubelet of %s log tail:\n%s", name, h.LogTail(40))
			}
		}
	}
}

// hollowKubelet is the suite's hollow-kubelet when the cluster has hollow nodes.
func hollowKubelet(hollow bool) string {
	if !hollow {
		return ""
	}
	return env.Tool(binaries.HollowKubelet)
}

// nodeID is the ID the driver knows a node by.
func (c *cluster) nodeID(node string) string { return c.local.NodeID(node) }

// publishes returns the recorded ControllerPublishVolume calls on the volume that
// ended with code on node.
func (c *cluster) publishes(v workload.Volume, node string, code codes.Code) []csidriver.Call {
	return callsWith(c.local.Driver.CallsFor(csidriver.OpPublish, v.Handle), c.nodeID(node), code)
}

func (c *cluster) unpublishes(v workload.Volume, node string, code codes.Code) []csidriver.Call {
	return callsWith(c.local.Driver.CallsFor(csidriver.OpUnpublish, v.Handle), c.nodeID(node), code)
}

func callsWith(calls []csidriver.Call, nodeID string, code codes.Code) []csidriver.Call {
	return slices.DeleteFunc(calls, func(call csidriver.Call) bool { return call.NodeID != nodeID || call.Code != code })
}

// kubectl runs the real kubectl with the admin kubeconfig and returns its output.
func (c *cluster) kubectl(args ...string) string {
	c.T.Helper()
	stdout, _, err := env.Kubectl().Run(c.T.Context(), "", args...)
	c.Must(err)
	return stdout
}
