package localcluster

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/attachdetach-controller/attachdetach-controller/internal/csidriver"
	"github.com/attachdetach-controller/attachdetach-controller/internal/hollownode"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
)

const (
	// nodeReadyTimeout bounds the wait for a started kubelet's node to be Ready with
	// the driver registered.
	nodeReadyTimeout = time.Minute
	// nodePollInterval is how often that wait looks at the API server.
	nodePollInterval = 100 * time.Millisecond
)

// HollowNode is one node run by the real kubelet (internal/hollownode) with the
// driver's node plugin registered to it.
type HollowNode struct {
	*hollownode.Node
	// Plugin is the CSI driver's node plugin on this node.
	Plugin *csidriver.NodePlugin
}

// startHollowNodes serves the driver's node plugin for every node, starts a hollow
// kubelet for each, and waits until each node is Ready with the driver registered.
func (c *Cluster) startHollowNodes(ctx context.Context, opts Options) error {
	c.Hollow = map[string]*HollowNode{}
	for _, name := range c.Nodes {
		root := filepath.Join(c.Dir, name)
		node, err := hollownode.New(ctx, hollownode.Options{
			Binary:                    opts.HollowKubelet,
			Kubeconfig:                c.Kubeconfig,
			Name:                      name,
			RootDir:                   root,
			LogFile:                   filepath.Join(c.Dir, "kubelet-"+name+".log"),
			NodeStatusUpdateFrequency: opts.NodeStatusUpdateFrequency,
			NodeLeaseDuration:         opts.NodeLeaseDuration,
		})
		if err != nil {
			return err
		}
		plugin, err := csidriver.ServeNode(ctx, c.Driver, c.NodeID(name), filepath.Join(root, "csi.sock"), node.RegistryDir())
		if err != nil {
			return err
		}
		c.Hollow[name] = &HollowNode{Node: node, Plugin: plugin}
		if err := node.Start(ctx); err != nil {
			return err
		}
	}
	for _, name := range c.Nodes {
		if err := c.WaitNodeReady(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

// WaitNodeReady waits until a hollow node's Node is Ready, carries the controller
// attach/detach annotation, and its CSINode has the driver with the node's ID: what a
// kubelet that has just started, or started again, needs before it mounts anything.
func (c *Cluster) WaitNodeReady(ctx context.Context, name string) error {
	var why string
	err := wait.PollUntilContextTimeout(ctx, nodePollInterval, nodeReadyTimeout, true, func(ctx context.Context) (bool, error) {
		why = c.nodeNotReady(ctx, name)
		return why == "", nil
	})
	if err != nil {
		if h := c.Hollow[name]; h != nil {
			why += "; kubelet log tail:\n" + h.LogTail(20)
		}
		return fmt.Errorf("node %s not ready after %s: %s", name, nodeReadyTimeout, why)
	}
	return nil
}

// nodeNotReady tells why a node is not ready for volumes yet, "" if it is.
func (c *Cluster) nodeNotReady(ctx context.Context, name string) string {
	node, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("reading the node: %v", err)
	}
	if node.Annotations[sim.ControllerManagedAnnotation] != "true" {
		return "no " + sim.ControllerManagedAnnotation + " annotation"
	}
	if !slices.ContainsFunc(node.Status.Conditions, func(cond corev1.NodeCondition) bool {
		return cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue
	}) {
		return "not Ready"
	}
	csiNode, err := c.Client.StorageV1().CSINodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "no CSINode"
	}
	if err != nil {
		return fmt.Sprintf("reading the CSINode: %v", err)
	}
	for _, d := range csiNode.Spec.Drivers {
		if d.Name == c.DriverName && d.NodeID == c.NodeID(name) {
			return ""
		}
	}
	return "driver " + c.DriverName + " not registered in the CSINode"
}

// stopHollowNodes stops the kubelets, then the node plugins.
func (c *Cluster) stopHollowNodes() {
	for _, name := range c.Nodes {
		h := c.Hollow[name]
		if h == nil {
			continue
		}
		if err := h.Stop(); err != nil {
			logError(err, "Stopping a hollow kubelet", "node", name)
		}
		h.Plugin.Stop()
	}
}
