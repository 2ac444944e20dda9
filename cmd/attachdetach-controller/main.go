// Command attachdetach-controller attaches and detaches CSI volumes in place of the
// attach/detach loop of kube-controller-manager.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/cmd/attachdetach-controller/app"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/version"
)

func main() {
	opts, err := app.ParseFlags(os.Args[1:], os.Stderr)
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
