// Command attachdetach-controller attaches and detaches CSI volumes in place of the
// attach/detach loop of kube-controller-manager.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/cmd/attachdetach-controller/app"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/version"
)

// defaultGCPercent trades a little CPU during bursts of attaches for a smaller peak
// memory: the controller's live heap is small, and most of its peak is garbage
// from decoding watch events. GOGC in the environment overrides it.
const defaultGCPercent = 50

func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
	opts, err := app.ParseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "attachdetach-controller:", err)
		os.Exit(2)
	}
	if opts.ShowVersion {
		fmt.Println(version.String())
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	err = app.Run(ctx, opts)
	klog.Flush()
	if err != nil {
		klog.Background().Error(err, "Controller stopped")
		klog.Flush()
		os.Exit(1)
	}
}
