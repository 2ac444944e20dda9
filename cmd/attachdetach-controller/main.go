// Command attachdetach-controller attaches and detaches volumes in place of the
// attach/detach loop of kube-controller-manager. Its explain subcommand (also
// installed as the kubectl plugin kubectl-attachdetach) tells why a volume is, or
// is not, attached.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
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

// pluginName is the binary's name as a kubectl plugin: kubectl attachdetach ...
const pluginName = "kubectl-attachdetach"

func main() {
	args := os.Args[1:]
	if filepath.Base(os.Args[0]) == pluginName || (len(args) > 0 && args[0] == "explain") {
		os.Exit(explainMain(args))
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
	opts, err := app.ParseFlags(args, os.Stderr)
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
	if err := app.ApplyLogging(opts); err != nil {
		fmt.Fprintln(os.Stderr, "attachdetach-controller:", err)
		os.Exit(2)
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

// explainMain runs the explain command, the one subcommand, also reached as
// kubectl plugin.
func explainMain(args []string) int {
	if len(args) == 0 || args[0] != "explain" {
		fmt.Fprintln(os.Stderr, "usage: kubectl attachdetach explain (pod|pvc|pv|node|volumeattachment)/NAME [-n NAMESPACE] [-o text|json|yaml]")
		return 2
	}
	opts, err := app.ParseExplainFlags(args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "explain:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := app.RunExplain(ctx, opts, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "explain:", err)
		return 1
	}
	return 0
}
