package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
	"github.com/attachdetach-controller/attachdetach-controller/internal/proc"
)

// stopGracePeriod is how long the controller gets after SIGTERM to give up its lease.
const stopGracePeriod = 15 * time.Second

// runAgainst runs the controller against the cluster of the kubeconfig(s) in
// KUBECONFIG, with leader election, its log on this program's output, until ctx
// ends (Ctrl-C).
func runAgainst(ctx context.Context, stop context.CancelFunc, kubeconfigEnv string, extraArgs []string) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	merged, err := rules.Load()
	if err != nil {
		return fmt.Errorf("loading KUBECONFIG=%s: %w", kubeconfigEnv, err)
	}
	server, err := currentServer(merged)
	if err != nil {
		return fmt.Errorf("KUBECONFIG=%s: %w", kubeconfigEnv, err)
	}
	kubeconfig := kubeconfigEnv
	if len(filepath.SplitList(kubeconfigEnv)) > 1 {
		// The controller takes one file: write the merged configuration, flattened.
		dir, err := os.MkdirTemp("", "attachdetach-kubeconfig-")
		if err != nil {
			return fmt.Errorf("creating a temporary directory: %w", err)
		}
		defer removeDir(dir)
		kubeconfig = filepath.Join(dir, "kubeconfig")
		if err := writeFlattened(merged, kubeconfig); err != nil {
			return err
		}
	}

	binary, err := binaries.Controller(ctx)
	if err != nil {
		return err
	}
	args := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--leader-elect=true",
		// A developer's machine: metrics on plain HTTP, no token needed.
		"--http-endpoint=127.0.0.1:0",
		"--http-endpoint-insecure",
		"-v=2",
	}, extraArgs...)
	fmt.Printf("KUBECONFIG is set: running the attachdetach-controller against %s (context %q) with leader election.\n", server, merged.CurrentContext)
	fmt.Printf("+ %s %s\n", binary, strings.Join(args, " "))
	// Its own process group: Ctrl-C reaches this program, which passes on SIGTERM
	// so that the controller gives its lease up.
	p, err := proc.StartAttached("the controller", binary, args...)
	if err != nil {
		return err
	}
	select {
	case <-p.Done():
		return controllerExit(p.Err())
	case <-ctx.Done():
	}
	stop()
	fmt.Println("\nStopping the controller")
	if err := p.Stop(stopGracePeriod); err != nil {
		return err
	}
	return controllerExit(p.Err())
}

func controllerExit(err error) error {
	if err != nil {
		return fmt.Errorf("the controller exited: %w", err)
	}
	return nil
}

// currentServer returns the API server URL of the kubeconfig's current context.
func currentServer(cfg *clientcmdapi.Config) (string, error) {
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return "", fmt.Errorf("no current context (current-context is %q)", cfg.CurrentContext)
	}
	cluster, ok := cfg.Clusters[ctx.Cluster]
	if !ok {
		return "", fmt.Errorf("context %q names cluster %q, which is not defined", cfg.CurrentContext, ctx.Cluster)
	}
	return cluster.Server, nil
}

// writeFlattened writes the current context of cfg, with the files it refers to
// inlined, to path.
func writeFlattened(cfg *clientcmdapi.Config, path string) error {
	cfg = cfg.DeepCopy()
	if err := clientcmdapi.MinifyConfig(cfg); err != nil {
		return fmt.Errorf("reducing the kubeconfig to its current context: %w", err)
	}
	if err := clientcmdapi.FlattenConfig(cfg); err != nil {
		return fmt.Errorf("inlining the files the kubeconfig refers to: %w", err)
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing the merged kubeconfig: %w", err)
	}
	return nil
}
