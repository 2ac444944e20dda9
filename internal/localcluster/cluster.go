// Package localcluster brings up, on one machine, everything the attach/detach
// controller works with: etcd and kube-apiserver (internal/testenv), the in-memory CSI
// test driver on a unix socket (internal/csidriver), the real CSI external-attacher
// (internal/externalattacher) running as a ServiceAccount with upstream's permissions,
// for a few nodes either the real kubelet with a fake container runtime and mounter
// (internal/hollownode, with the driver's node plugin registered to each) or a
// kubelet stand-in (internal/sim), and the attachdetach-controller
// built from this repository as a child process (internal/controllerproc). The local
// demo (hack/localup) and the end-to-end suite (test/e2e) both use it.
package localcluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
	"github.com/attachdetach-controller/attachdetach-controller/internal/controllerproc"
	"github.com/attachdetach-controller/attachdetach-controller/internal/csidriver"
	"github.com/attachdetach-controller/attachdetach-controller/internal/externalattacher"
	"github.com/attachdetach-controller/attachdetach-controller/internal/proc"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
)

// Defaults of Options.
const (
	DefaultDriverName = "demo.csi.attachdetach.io"
	// attacherNamespace and attacherAccount are the ServiceAccount csi-attacher runs as.
	attacherNamespace = metav1.NamespaceDefault
	attacherAccount   = "csi-attacher"
)

// DefaultNodes are the nodes simulated when Options.Nodes is empty.
var DefaultNodes = []string{"node-1", "node-2", "node-3"}

// Options configures a local cluster. The zero value is a complete cluster of its own.
type Options struct {
	// Env is a running control plane to use. Nil starts one, which Stop stops.
	Env *testenv.Env
	// Dir holds the cluster's files: kubeconfigs, the driver's socket and the logs
	// of csi-attacher and the controller. Empty: a new temporary directory (and the
	// control plane's files, when the cluster starts its own), which Stop removes.
	Dir string
	// Nodes are the names of the nodes; DefaultNodes if empty.
	Nodes []string
	// HollowNodes runs every node with the real kubelet (hack/tools/hollow-kubelet)
	// instead of the kubelet stand-in: kubelet registers the Node, the driver's node
	// plugin registers with it, and pods really run (on a fake runtime) once kubelet
	// has staged and published their volumes.
	HollowNodes bool
	// HollowKubelet is the hollow-kubelet executable; built on first use if empty.
	HollowKubelet string
	// NodeStatusUpdateFrequency and NodeLeaseDuration configure the hollow kubelets
	// (see hollownode.Options); 0 keeps kubelet's 10s and 40s.
	NodeStatusUpdateFrequency, NodeLeaseDuration time.Duration
	// NodeMonitorGracePeriod, if set, runs kube-controller-manager's node lifecycle
	// controller alone, with this --node-monitor-grace-period: a node whose kubelet
	// stops goes NotReady. It judges every node of the control plane.
	NodeMonitorGracePeriod time.Duration
	// KubeControllerManager is the kube-controller-manager executable for
	// NodeMonitorGracePeriod; built on first use if empty.
	KubeControllerManager string
	// DriverName is the CSI driver's name; DefaultDriverName if empty.
	DriverName string
	// UnmountDelay is how long the kubelet stand-in takes to unmount a volume a pod
	// no longer needs; hollow nodes ignore it.
	UnmountDelay time.Duration
	// AttacherTimeout bounds each ControllerPublish/Unpublish call (csi-attacher's
	// --timeout); 0 keeps csi-attacher's 15s.
	AttacherTimeout time.Duration
	// AttacherRetryStart and AttacherRetryMax bound csi-attacher's backoff after a
	// failed call; 0 keeps its defaults (1s and 5m).
	AttacherRetryStart, AttacherRetryMax time.Duration
	// Controller configures the controller process; the cluster sets its Kubeconfig,
	// and its LogFile unless set.
	Controller controllerproc.Options
	// Progress, if set, receives one line per component started.
	Progress io.Writer
}

// Cluster is a running local cluster. Everything in it runs until Stop.
type Cluster struct {
	// Env is the control plane.
	Env *testenv.Env
	// Client is an admin client without client-side rate limit.
	Client kubernetes.Interface
	// Dir holds the cluster's files.
	Dir string
	// Kubeconfig is the path of an admin kubeconfig (the control plane's).
	Kubeconfig string
	// DriverName is the CSI driver's name; Nodes the nodes.
	DriverName string
	Nodes      []string
	// Driver is the CSI driver, served in this process: its recorded calls, what it
	// has published, and its fault injection.
	Driver   *csidriver.Driver
	Server   *csidriver.Server
	Attacher *externalattacher.Attacher
	// Kubelet is the kubelet stand-in; nil with Options.HollowNodes.
	Kubelet *sim.Kubelet
	// Hollow are the hollow nodes by name; nil without Options.HollowNodes.
	Hollow map[string]*HollowNode
	// NodeStatusUpdateFrequency is the hollow kubelets' node status period, 0 for
	// kubelet's default.
	NodeStatusUpdateFrequency time.Duration
	// Controller is the attachdetach-controller process.
	Controller *controllerproc.Controller
	// NodeLifecycle is kube-controller-manager running the node lifecycle
	// controller; nil without Options.NodeMonitorGracePeriod.
	NodeLifecycle *proc.Process

	ownEnv, ownDir bool
	// stopBackground ends the kubelet stand-in.
	stopBackground context.CancelFunc
}

// Start brings up a cluster: the control plane (unless opts.Env is given), the CSI
// driver, csi-attacher, the CSIDriver object, the nodes (hollow kubelets, waited for
// until Ready with the driver registered, or the kubelet stand-in with the CSINodes
// made for it), and the controller, which it waits for until its state is rebuilt.
// The tools and the controller are built on first use (see internal/binaries). On
// error everything started is stopped again.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if len(opts.Nodes) == 0 {
		opts.Nodes = DefaultNodes
	}
	if opts.DriverName == "" {
		opts.DriverName = DefaultDriverName
	}
	c := &Cluster{Dir: opts.Dir, DriverName: opts.DriverName, Nodes: opts.Nodes, Env: opts.Env, NodeStatusUpdateFrequency: opts.NodeStatusUpdateFrequency}
	if c.Dir == "" {
		dir, err := testenv.TempDir("attachdetach-local-")
		if err != nil {
			return nil, err
		}
		c.Dir, c.ownDir = dir, true
	}
	// The kubelet stand-in lives until Stop, not until the end of ctx; it keeps
	// ctx's logger.
	background, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.stopBackground = cancel
	if err := c.start(ctx, background, opts); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx, background context.Context, opts Options) error {
	progress := func(format string, args ...any) {
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, format+"\n", args...)
		}
	}
	versions, err := binaries.ReadVersions()
	if err != nil {
		return err
	}
	if c.Env == nil {
		began := time.Now()
		env, err := testenv.Start(ctx, testenv.Options{BaseDir: c.Dir})
		if err != nil {
			return err
		}
		c.Env, c.ownEnv = env, true
		progress("etcd and kube-apiserver %s ready at %s (%s)", versions.Kubernetes, env.Host, roundDuration(time.Since(began)))
	}
	c.Client = c.Env.Client
	c.Kubeconfig = c.Env.AdminKubeconfig

	c.Driver = csidriver.New(c.DriverName)
	if c.Server, err = csidriver.Serve(ctx, c.Driver, filepath.Join(c.Dir, "csi.sock")); err != nil {
		return err
	}
	progress("CSI driver %s serving on %s", c.DriverName, c.Server.Endpoint())

	if err := c.startAttacher(ctx, opts); err != nil {
		return err
	}
	progress("csi-attacher %s running as ServiceAccount %s/%s (pid %d)", versions.ExternalAttacher, attacherNamespace, attacherAccount, c.Attacher.Pid())

	if err := c.createDriver(ctx); err != nil {
		return err
	}
	if opts.HollowNodes {
		began := time.Now()
		if err := c.startHollowNodes(ctx, opts); err != nil {
			return err
		}
		progress("kubelet %s (hollow: fake runtime and mounter) Ready on nodes %s, driver registered (%s)",
			versions.Kubernetes, strings.Join(c.Nodes, ", "), roundDuration(time.Since(began)))
	} else {
		if err := c.createCSINodes(ctx); err != nil {
			return err
		}
		if c.Kubelet, err = sim.StartKubelet(background, c.Env.AdminConfig(), sim.KubeletOptions{
			Nodes:        c.Nodes,
			CreateNodes:  true,
			ManagePods:   true,
			UnmountDelay: opts.UnmountDelay,
		}); err != nil {
			return fmt.Errorf("starting the kubelet stand-in: %w", err)
		}
		progress("kubelet stand-in running nodes %s", strings.Join(c.Nodes, ", "))
	}

	if opts.NodeMonitorGracePeriod > 0 {
		if err := c.startNodeLifecycle(ctx, opts.KubeControllerManager, opts.NodeMonitorGracePeriod); err != nil {
			return err
		}
		progress("kube-controller-manager %s running its node lifecycle controller alone (pid %d)", versions.Kubernetes, c.NodeLifecycle.Pid())
	}

	ctrlOpts := opts.Controller
	ctrlOpts.Kubeconfig = c.Kubeconfig
	if ctrlOpts.LogFile == "" {
		ctrlOpts.LogFile = filepath.Join(c.Dir, "attachdetach-controller.log")
	}
	if c.Controller, err = controllerproc.New(ctx, ctrlOpts); err != nil {
		return err
	}
	if err := c.Controller.Start(ctx); err != nil {
		return err
	}
	if err := c.Controller.WaitReady(ctx); err != nil {
		return err
	}
	progress("attachdetach-controller running (pid %d)", c.Controller.Pid())
	return nil
}

func (c *Cluster) startAttacher(ctx context.Context, opts Options) error {
	if err := externalattacher.GrantRBAC(ctx, c.Client, attacherNamespace, attacherAccount); err != nil {
		return err
	}
	token, err := c.Env.ServiceAccountToken(ctx, attacherNamespace, attacherAccount)
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(c.Dir, "csi-attacher.kubeconfig")
	if err := c.Env.WriteKubeconfig(kubeconfig, token); err != nil {
		return err
	}
	c.Attacher, err = externalattacher.Start(ctx, externalattacher.Options{
		Kubeconfig:         kubeconfig,
		CSIAddress:         c.Server.Endpoint(),
		LogFile:            filepath.Join(c.Dir, "csi-attacher.log"),
		Timeout:            opts.AttacherTimeout,
		RetryIntervalStart: opts.AttacherRetryStart,
		RetryIntervalMax:   opts.AttacherRetryMax,
	})
	return err
}

// createDriver creates the CSIDriver object, attach required.
func (c *Cluster) createDriver(ctx context.Context) error {
	attachRequired := true
	driver := &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: c.DriverName},
		Spec:       storagev1.CSIDriverSpec{AttachRequired: &attachRequired},
	}
	if _, err := c.Client.StorageV1().CSIDrivers().Create(ctx, driver, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating CSIDriver %s: %w", c.DriverName, err)
	}
	return nil
}

// createCSINodes creates, for every node, the CSINode that maps it to its driver
// node ID, as kubelet does when the driver registers; for the kubelet stand-in,
// which creates the Node objects but registers no driver.
func (c *Cluster) createCSINodes(ctx context.Context) error {
	for _, node := range c.Nodes {
		if _, err := externalattacher.EnsureCSINode(ctx, c.Client, node, c.DriverName, c.NodeID(node)); err != nil {
			return err
		}
	}
	return nil
}

// NodeID is the ID the driver knows a node by, as its CSINode says.
func (c *Cluster) NodeID(node string) string {
	return node + "-id"
}

// Stop stops everything Start started, the controller and csi-attacher first, and
// removes the files it made. It is safe to call more than once.
func (c *Cluster) Stop() {
	if c.Controller != nil {
		if err := c.Controller.Stop(); err != nil {
			logError(err, "Stopping the controller")
		}
	}
	if c.Attacher != nil {
		c.Attacher.Stop()
	}
	if c.NodeLifecycle != nil {
		if err := c.NodeLifecycle.Stop(lifecycleStopGrace); err != nil {
			logError(err, "Stopping kube-controller-manager")
		}
	}
	c.stopHollowNodes()
	c.stopBackground()
	if c.Server != nil {
		c.Server.Stop()
	}
	if c.ownEnv && c.Env != nil {
		c.Env.Stop()
	}
	if c.ownDir {
		if err := os.RemoveAll(c.Dir); err != nil {
			logError(err, "Removing the cluster directory", "dir", c.Dir)
		}
	}
}

// LogFiles lists the log files of the cluster's processes, for the user to look at.
func (c *Cluster) LogFiles() []string {
	var logs []string
	if c.Env != nil {
		logs = append(logs, c.Env.EtcdLog, c.Env.APIServerLog)
	}
	if c.Attacher != nil {
		logs = append(logs, c.Attacher.LogFile())
	}
	if c.Controller != nil {
		logs = append(logs, c.Controller.LogFile())
	}
	if c.NodeLifecycle != nil {
		logs = append(logs, c.NodeLifecycle.LogPath())
	}
	for _, name := range c.Nodes {
		if h := c.Hollow[name]; h != nil {
			logs = append(logs, h.LogFile())
		}
	}
	return logs
}

// logError logs an error of Stop, which has nobody to return it to.
func logError(err error, msg string, keysAndValues ...any) {
	klog.Background().Error(err, msg, keysAndValues...)
}

func roundDuration(d time.Duration) time.Duration {
	return d.Round(100 * time.Millisecond)
}
