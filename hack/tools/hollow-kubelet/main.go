// Command hollow-kubelet runs one hollow node for the attachdetach-controller's tests
// and demo: the real kubelet of k8s.io/kubernetes (volume manager, CSI volume plugin,
// plugin watcher, node status and lease) built through k8s.io/kubernetes/pkg/kubemark,
// with kubemark's fake container runtime, fake image service and fake mounter.
//
// It differs from kubemark's hollow node where this controller needs it to: controller
// attach/detach is on (the node carries volumes.kubernetes.io/controller-managed-attach-detach
// and kubelet waits for node.status.volumesAttached instead of attaching itself), every
// file lives under --root-dir (the plugin registration directory is
// <root-dir>/plugins_registry), the kubelet server listens on 127.0.0.1:--kubelet-port,
// the read-only port is off, and the node-status period and lease duration can be
// shortened for tests.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	remote "k8s.io/cri-client/pkg"
	fakeremote "k8s.io/cri-client/pkg/fake"
	"k8s.io/klog/v2"
	cadvisortest "k8s.io/kubernetes/pkg/kubelet/cadvisor/testing"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	"k8s.io/kubernetes/pkg/kubemark"
)

// options are the command's flags.
type options struct {
	kubeconfig        string
	nodeName          string
	rootDir           string
	kubeletPort       int
	nodeStatusPeriod  time.Duration
	leaseDurationSecs int
	syncFrequency     time.Duration
	maxPods           int
	apiQPS            float64
	apiBurst          int
}

func main() {
	var o options
	fs := flag.NewFlagSet("hollow-kubelet", flag.ExitOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the API server")
	fs.StringVar(&o.nodeName, "name", "", "name of the node")
	fs.StringVar(&o.rootDir, "root-dir", "", "kubelet's root directory; created if missing; keep it short, the plugin sockets live under it")
	fs.IntVar(&o.kubeletPort, "kubelet-port", 0, "port of the kubelet server on 127.0.0.1")
	fs.DurationVar(&o.nodeStatusPeriod, "node-status-update-frequency", 10*time.Second, "kubelet's nodeStatusUpdateFrequency: how often node status, volumesInUse included, is computed and written when it changed")
	fs.IntVar(&o.leaseDurationSecs, "node-lease-duration-seconds", 40, "kubelet's nodeLeaseDurationSeconds; the lease is renewed every quarter of it")
	fs.DurationVar(&o.syncFrequency, "sync-frequency", 10*time.Second, "kubelet's syncFrequency: the period of pod resyncs")
	fs.IntVar(&o.maxPods, "max-pods", 110, "pods the node accepts")
	fs.Float64Var(&o.apiQPS, "kube-api-qps", 50, "client QPS to the API server")
	fs.IntVar(&o.apiBurst, "kube-api-burst", 100, "client burst to the API server")
	klog.InitFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		klog.Fatalf("parsing flags: %v", err)
	}
	if o.kubeconfig == "" || o.nodeName == "" || o.rootDir == "" || o.kubeletPort == 0 {
		klog.Fatalf("--kubeconfig, --name, --root-dir and --kubelet-port are required")
	}
	if err := run(context.Background(), o); err != nil {
		klog.Fatalf("hollow-kubelet %s: %v", o.nodeName, err)
	}
}

// run starts the fake runtime and the kubelet, and blocks for as long as the kubelet runs.
func run(ctx context.Context, o options) error {
	root, err := filepath.Abs(o.rootDir)
	if err != nil {
		return fmt.Errorf("resolving --root-dir: %w", err)
	}
	for _, dir := range []string{root, filepath.Join(root, "static-pods"), filepath.Join(root, "pod-logs")} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("creating %s: %w", dir, err)
		}
	}

	restConfig, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("loading %s: %w", o.kubeconfig, err)
	}
	restConfig.UserAgent = "hollow-kubelet"
	restConfig.ContentType = "application/vnd.kubernetes.protobuf"
	restConfig.QPS = float32(o.apiQPS)
	restConfig.Burst = o.apiBurst
	client, err := clientset.NewForConfig(restConfig)
	if err != nil {
		return fmt.Errorf("creating the client: %w", err)
	}

	flags, config := kubemark.GetHollowKubeletConfig(&kubemark.HollowKubeletOptions{
		NodeName:    o.nodeName,
		KubeletPort: o.kubeletPort,
		MaxPods:     o.maxPods,
		NodeLabels:  map[string]string{},
	})
	// GetHollowKubeletConfig makes a root directory of its own in the temporary
	// directory; every node here has the one it was given instead.
	if err := os.RemoveAll(flags.RootDirectory); err != nil {
		return fmt.Errorf("removing kubemark's temporary root directory: %w", err)
	}
	flags.RootDirectory = root
	flags.CertDirectory = filepath.Join(root, "pki")
	config.StaticPodPath = filepath.Join(root, "static-pods")
	config.PodLogsDir = filepath.Join(root, "pod-logs")
	config.Address = "127.0.0.1"
	config.ReadOnlyPort = 0
	config.EnableControllerAttachDetach = true
	config.NodeStatusUpdateFrequency.Duration = o.nodeStatusPeriod
	config.NodeLeaseDurationSeconds = int32(o.leaseDurationSecs)
	config.SyncFrequency.Duration = o.syncFrequency

	heartbeatConfig := *restConfig
	heartbeatConfig.Timeout = min(o.nodeStatusPeriod, time.Duration(o.leaseDurationSecs)*time.Second)
	heartbeatConfig.QPS = -1
	heartbeatClient, err := clientset.NewForConfig(&heartbeatConfig)
	if err != nil {
		return fmt.Errorf("creating the heartbeat client: %w", err)
	}

	// The fake runtime's socket lives in the root directory, so that a killed node
	// leaves nothing behind elsewhere.
	endpoint := "unix://" + filepath.Join(root, "runtime.sock")
	if err := os.Remove(filepath.Join(root, "runtime.sock")); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("removing the last run's runtime socket: %w", err)
	}
	fakeRuntime := fakeremote.NewFakeRemoteRuntime()
	if err := fakeRuntime.Start(endpoint); err != nil {
		return fmt.Errorf("starting the fake runtime on %s: %w", endpoint, err)
	}
	defer fakeRuntime.Stop()
	runtimeService, err := remote.NewRemoteRuntimeServiceBuilder().
		WithEndpoint(endpoint).
		WithConnectionTimeout(15 * time.Second).
		Build(ctx)
	if err != nil {
		return fmt.Errorf("connecting to the fake runtime: %w", err)
	}

	klog.InfoS("Starting hollow kubelet", "node", o.nodeName, "rootDir", root, "port", o.kubeletPort,
		"nodeStatusUpdateFrequency", o.nodeStatusPeriod, "nodeLeaseDurationSeconds", o.leaseDurationSecs)
	kubemark.NewHollowKubelet(flags, config, client, heartbeatClient,
		&cadvisortest.Fake{NodeName: o.nodeName},
		fakeRuntime.ImageService, runtimeService,
		cm.NewStubContainerManager(),
	).Run(ctx)
	return nil
}
