// Command attachdetach-controller attaches and detaches volumes in place of the
// attach/detach loop of kube-controller-manager. Its explain command (also
// installed as the kubectl plugin kubectl-attachdetach, `kubectl attachdetach
// explain`) tells why a volume is, or is not, attached.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/cmd/attachdetach-controller/app"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/version"
)

func main() {
	args := os.Args[1:]
	if displayName, pluginArgs, ok := pluginInvocation(os.Args[0], args); ok {
		os.Exit(pluginMain(displayName, pluginArgs))
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

// pluginInvocation tells whether the command line is the plugin's: the binary
// run by kubectl as its plugin, or `attachdetach-controller explain` (and
// `options`, which explain's help points to).
// It returns the command as the user typed it, for help and errors, and the
// arguments of that command.
func pluginInvocation(argv0 string, args []string) (displayName string, pluginArgs []string, ok bool) {
	binary := strings.TrimSuffix(filepath.Base(argv0), ".exe")
	switch {
	case binary == app.PluginName:
		return "kubectl attachdetach", args, true
	case len(args) > 0 && (args[0] == "explain" || args[0] == "options"):
		return binary, args, true
	}
	return "", nil, false
}

// pluginMain runs the explain command and returns its exit status.
func pluginMain(displayName string, args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cmd := app.NewPluginCommand(displayName, os.Stdout, os.Stderr)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
	}
	return app.ExitCode(err)
}
