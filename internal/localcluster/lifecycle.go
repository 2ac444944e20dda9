package localcluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
	"github.com/attachdetach-controller/attachdetach-controller/internal/proc"
)

const (
	// lifecycleReadyLine is what kube-controller-manager logs once its node lifecycle
	// controller runs.
	lifecycleReadyLine = `"Starting node controller"`
	// lifecycleReadyTimeout bounds the wait for it.
	lifecycleReadyTimeout = time.Minute
	// lifecycleStopGrace is how long Stop waits after SIGTERM before SIGKILL.
	lifecycleStopGrace = 5 * time.Second
)

// startNodeLifecycle runs kube-controller-manager with its node lifecycle controller
// alone: it marks a node whose kubelet stopped renewing its lease NotReady (condition
// Unknown) after gracePeriod, and taints it unreachable. No other controller runs, so
// pods are neither evicted nor garbage-collected.
func (c *Cluster) startNodeLifecycle(ctx context.Context, binary string, gracePeriod time.Duration) error {
	if binary == "" {
		var err error
		if binary, err = binaries.Tool(ctx, binaries.KubeControllerManager); err != nil {
			return err
		}
	}
	p, err := proc.Start("kube-controller-manager (node lifecycle)", filepath.Join(c.Dir, "kube-controller-manager.log"), binary,
		"--kubeconfig="+c.Kubeconfig,
		"--controllers=node-lifecycle-controller",
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
		"--node-monitor-period=1s",
		"--node-monitor-grace-period="+gracePeriod.String(),
		"-v="+strconv.Itoa(2),
	)
	if err != nil {
		return err
	}
	c.NodeLifecycle = p
	ctx, cancel := context.WithTimeout(ctx, lifecycleReadyTimeout)
	defer cancel()
	if err := p.WaitReady(ctx, lifecycleReadyLine); err != nil {
		return fmt.Errorf("starting kube-controller-manager's node lifecycle controller: %w", err)
	}
	return nil
}
