// Command csi-test-driver serves the project's in-memory CSI test driver on a unix
// socket, for demos and end-to-end tests that run the CSI external-attacher against
// it. With --control-address it also serves the HTTP control API of package
// test/csidriver/control, through which another process injects faults and delays
// and reads which volumes are published where.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/test/csidriver"
	"github.com/attachdetach-controller/attachdetach-controller/test/csidriver/control"
)

func main() {
	endpoint := flag.String("endpoint", "unix:///tmp/csi-test-driver.sock", "CSI endpoint, unix:///absolute/path.")
	driverName := flag.String("drivername", "csi.test.attachdetach.io", "Driver name reported by GetPluginInfo.")
	controlAddress := flag.String("control-address", "", "Where to serve the HTTP control API: a loopback host:port or unix:///absolute/path. Empty disables it.")
	delay := flag.Duration("delay", 0, "Initial delay of every ControllerPublishVolume and ControllerUnpublishVolume call.")
	klog.InitFlags(nil)
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *endpoint, *driverName, *controlAddress, *delay); err != nil {
		klog.ErrorS(err, "csi-test-driver failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}

func run(ctx context.Context, endpoint, driverName, controlAddress string, delay time.Duration) error {
	logger := klog.FromContext(ctx)
	d := csidriver.New(driverName)
	d.SetDelay(delay)
	// The control API comes up first: once the driver answers, it can be steered.
	var controlDone <-chan struct{}
	if controlAddress != "" {
		ctl, err := control.Serve(ctx, d, controlAddress)
		if err != nil {
			return fmt.Errorf("start control API: %w", err)
		}
		defer ctl.Stop()
		controlDone = ctl.Done()
	}

	srv, err := csidriver.Serve(ctx, d, endpoint)
	if err != nil {
		return fmt.Errorf("start CSI driver: %w", err)
	}
	defer srv.Stop()

	select {
	case <-ctx.Done():
		logger.Info("Shutting down")
		return nil
	case <-srv.Done():
		return srv.Err()
	case <-controlDone:
		return fmt.Errorf("control API stopped unexpectedly")
	}
}
