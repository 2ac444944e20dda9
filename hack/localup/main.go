// Command localup runs the attachdetach-controller for real; hack/run.sh builds and
// runs it.
//
// Without KUBECONFIG in the environment it brings up, on this machine, etcd and
// kube-apiserver on loopback, the CSI test driver on a unix socket, the CSI
// external-attacher, three hollow nodes (the real kubelet with a fake container
// runtime and mounter, hack/tools/hollow-kubelet) and the controller built from this
// repository, plays a demo, and keeps everything running until Ctrl-C. With
// KUBECONFIG set it runs the controller against that cluster, with leader election.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"
)

const usage = `Usage: hack/run.sh [flags] [-- controller flags]

Without KUBECONFIG in the environment (or with --local), brings up on this machine
etcd and kube-apiserver on loopback, the CSI test driver, the CSI external-attacher
(csi-attacher), nodes node-1..node-3 each run by the real kubelet with a fake
container runtime and mounter (a hollow node), and the attachdetach-controller built
from this repository; plays a demo that attaches, refuses, moves and detaches
volumes while kubelet stages, publishes and runs the pods, telling each step; prints an
'export KUBECONFIG=...' line and commands to try; and keeps running until Ctrl-C,
which stops every process it started and removes its files.

With KUBECONFIG set, runs the controller against that cluster with leader election
(Lease kube-system/attachdetach-controller), logging what it does, until Ctrl-C.

What it needs it builds or installs once and caches: kube-apiserver, kubectl,
csi-attacher and hollow-kubelet (hack/build-tools.sh, which tells each build as it
starts and ends; the first build takes 45 to 90 minutes on 2 cores), the controller
(go build), and etcd (apt-get install etcd-server, when running as root).

Flags after -- go to the controller (see its --help).

Flags:
`

// config is the command line.
type config struct {
	noDemo, once, local bool
	controllerArgs      []string
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "localup:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())

	kubeconfig := os.Getenv("KUBECONFIG")
	if kubeconfig != "" && !cfg.local {
		err = runAgainst(ctx, stop, kubeconfig, cfg.controllerArgs)
	} else {
		err = runLocal(ctx, stop, cfg)
	}
	klog.Flush()
	if err != nil && ctx.Err() != nil {
		fmt.Println("\nInterrupted")
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "localup:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, output io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("localup", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.Usage = func() {
		fmt.Fprint(output, usage)
		fs.PrintDefaults()
	}
	fs.BoolVar(&cfg.noDemo, "no-demo", false, "Bring the local cluster up without the demo and its objects.")
	fs.BoolVar(&cfg.once, "once", false, "Stop everything after the demo instead of waiting for Ctrl-C.")
	fs.BoolVar(&cfg.local, "local", false, "Bring up a local cluster even when KUBECONFIG is set.")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.Var(klogFlags.Lookup("v").Value, "v", "Verbosity of this program's own log: the CSI driver's calls at 2 (in localup.log in the cluster's directory).")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	cfg.controllerArgs = fs.Args()
	return cfg, nil
}
