package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
	"github.com/attachdetach-controller/attachdetach-controller/internal/controllerproc"
	"github.com/attachdetach-controller/attachdetach-controller/internal/localcluster"
	"github.com/attachdetach-controller/attachdetach-controller/internal/localcluster/demo"
	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

// runLocal brings up a local cluster, plays the demo unless cfg.noDemo, and waits for
// the end of ctx (Ctrl-C) unless cfg.once; then it stops everything. stop restores the
// default signal handling, so that a second Ctrl-C ends the program at once.
func runLocal(ctx context.Context, stop context.CancelFunc, cfg config) error {
	began := time.Now()
	fmt.Println("Bringing up a local cluster: etcd, kube-apiserver, CSI driver, csi-attacher, three hollow nodes (the real kubelet, fake runtime and mounter), attachdetach-controller")
	if err := ensureEtcd(ctx); err != nil {
		return err
	}
	tools, err := prepareTools(ctx)
	if err != nil {
		return err
	}
	kubectl := tools[binaries.Kubectl]
	step := time.Now()
	controller, err := binaries.Controller(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("attachdetach-controller built from this repository (%s): %s\n", since(step), controller)

	dir, err := testenv.TempDir("attachdetach-local-")
	if err != nil {
		return err
	}
	// failed keeps the logs for a look at what went wrong.
	failed := false
	defer func() { cleanDir(dir, failed) }()
	if err := logToFile(filepath.Join(dir, "localup.log")); err != nil {
		return err
	}
	metrics, err := freeAddress()
	if err != nil {
		return err
	}
	cluster, err := localcluster.Start(ctx, localcluster.Options{
		Dir:                dir,
		HollowNodes:        true,
		HollowKubelet:      tools[binaries.HollowKubelet],
		AttacherRetryStart: 200 * time.Millisecond,
		AttacherRetryMax:   10 * time.Second,
		Controller: controllerproc.Options{
			Binary:       controller,
			LeaderElect:  true,
			HTTPEndpoint: metrics,
			Args:         cfg.controllerArgs,
		},
		Progress: os.Stdout,
	})
	if err != nil {
		failed = ctx.Err() == nil
		return err
	}
	defer func() {
		fmt.Println("Stopping the controller, csi-attacher, the kubelets, the CSI driver, kube-apiserver and etcd")
		if failed {
			cluster.Env.KeepLogs()
		}
		cluster.Stop()
	}()
	fmt.Printf("Local cluster up in %s\n", since(began))

	if !cfg.noDemo {
		if err := demo.Run(ctx, cluster, os.Stdout, demo.Options{Kubectl: kubectl}); err != nil {
			failed = ctx.Err() == nil
			return err
		}
		fmt.Printf("The demo ended %s after the start\n", since(began))
	}
	if cfg.once {
		return nil
	}
	if err := printTryIt(cluster, kubectl, metrics, !cfg.noDemo); err != nil {
		return err
	}
	<-ctx.Done()
	stop()
	fmt.Println()
	return nil
}

// ensureEtcd installs etcd with apt-get if it is not on the PATH and this runs as root.
func ensureEtcd(ctx context.Context) error {
	if _, err := exec.LookPath("etcd"); err == nil {
		return nil
	}
	if os.Geteuid() != 0 {
		return errors.New("etcd is not installed: install it (Debian, Ubuntu: sudo apt-get install etcd-server) and run again")
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return errors.New("etcd is not installed and there is no apt-get to install it with: install etcd and run again")
	}
	fmt.Println("etcd is not installed: apt-get install etcd-server (once)")
	for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "etcd-server"}} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	if _, err := exec.LookPath("etcd"); err != nil {
		return fmt.Errorf("etcd-server installed, but etcd is still not on the PATH: %w", err)
	}
	return nil
}

// prepareTools builds the upstream binaries the cluster runs, unless they are cached,
// and returns their paths by name. hack/build-tools.sh tells each build as it starts
// and ends.
func prepareTools(ctx context.Context) (map[string]string, error) {
	began := time.Now()
	versions, err := binaries.ReadVersions()
	if err != nil {
		return nil, err
	}
	fmt.Printf("Tools kube-apiserver, kubectl and hollow-kubelet %s, csi-attacher %s: built by hack/build-tools.sh unless cached (the first build takes 45 to 90 minutes on 2 cores)\n",
		versions.Kubernetes, versions.ExternalAttacher)
	tools := map[string]string{}
	for _, name := range []string{binaries.KubeAPIServer, binaries.Kubectl, binaries.CSIAttacher, binaries.HollowKubelet} {
		if tools[name], err = binaries.Tool(ctx, name); err != nil {
			return nil, err
		}
	}
	fmt.Printf("Tools ready (%s) in %s\n", since(began), filepath.Dir(tools[binaries.Kubectl]))
	return tools, nil
}

// logToFile sends this program's own log (the CSI calls, the driver's registrations
// with kubelet) to a file; errors still go to stderr too.
func logToFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("creating the log file: %w", err)
	}
	klog.LogToStderr(false)
	klog.SetOutput(f)
	return nil
}

// freeAddress returns a loopback address with a port that is free now.
func freeAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// printTryIt tells how to use the cluster from another shell.
func printTryIt(c *localcluster.Cluster, kubectl, metrics string, demoRan bool) error {
	var b strings.Builder
	fmt.Fprintf(&b, "\nThe cluster keeps running until Ctrl-C. In another shell:\n\n")
	fmt.Fprintf(&b, "  export KUBECONFIG=%s\n", c.Kubeconfig)
	fmt.Fprintf(&b, "  alias kubectl=%s    # the kubectl of the API server's version\n", kubectl)
	fmt.Fprintf(&b, "  kubectl get nodes,csinodes,csidrivers,volumeattachments\n")
	fmt.Fprintf(&b, "  kubectl get node %s -o jsonpath='{.status.volumesAttached}{\"\\n\"}'\n", c.Nodes[0])
	if demoRan {
		manifest := filepath.Join(c.Dir, "pod.yaml")
		node := c.Nodes[len(c.Nodes)-1]
		if err := os.WriteFile(manifest, []byte(podManifest(node)), 0o644); err != nil {
			return fmt.Errorf("writing the example pod: %w", err)
		}
		fmt.Fprintf(&b, "  kubectl -n %s get pvc,pods\n", demo.DefaultNamespace)
		fmt.Fprintf(&b, "  kubectl apply -f %s    # pod 'try' on %s with claim %s\n", manifest, node, demo.ClaimRWO)
		fmt.Fprintf(&b, "  kubectl get volumeattachments -w\n")
		fmt.Fprintf(&b, "  kubectl events -n %s --for pod/try\n", demo.DefaultNamespace)
		fmt.Fprintf(&b, "  kubectl -n %s delete pod try\n", demo.DefaultNamespace)
	}
	fmt.Fprintf(&b, "  curl -s http://%s/metrics | grep ^attachdetach_controller\n", metrics)
	fmt.Fprintf(&b, "  tail -f %s\n", c.Controller.LogFile())
	fmt.Fprintf(&b, "\nLogs: %s\n", strings.Join(c.LogFiles(), "\n      "))
	fmt.Print(b.String())
	return nil
}

func podManifest(node string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: try
  namespace: %s
spec:
  nodeName: %s
  containers:
  - name: app
    image: %s
    volumeMounts:
    - {name: data, mountPath: /data}
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: %s}
`, demo.DefaultNamespace, node, workload.PodImage, demo.ClaimRWO)
}

func removeDir(dir string) {
	klog.Flush()
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintf(os.Stderr, "localup: removing %s: %v\n", dir, err)
	}
}

// cleanDir removes the cluster's directory or, with keepLogs, all in it but the log
// files and the control plane's directory (which keeps only its logs itself).
func cleanDir(dir string, keepLogs bool) {
	if !keepLogs {
		removeDir(dir)
		return
	}
	klog.Flush()
	entries, err := os.ReadDir(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "localup: %v\n", err)
		return
	}
	for _, e := range entries {
		if !e.IsDir() && !strings.HasSuffix(e.Name(), ".log") {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	fmt.Fprintf(os.Stderr, "localup: logs kept in %s\n", dir)
}

func since(t time.Time) time.Duration {
	return time.Since(t).Round(100 * time.Millisecond)
}
