// Package hollownode runs hack/tools/hollow-kubelet, the real kubelet of the pinned
// Kubernetes version with kubemark's fake container runtime and fake mounter, as a
// child process for one node (see internal/proc): a root directory of its own, its
// own kubelet port, controller attach/detach on, killed and started again at will.
//
// The kubelet registers its Node (with the annotation
// volumes.kubernetes.io/controller-managed-attach-detach), keeps its lease and
// status, runs the pods bound to it on the fake runtime, and mounts their CSI volumes
// through the driver whose registration socket appears in RegistryDir. A kubelet
// started again on the same root directory finds what the last one left there, as a
// restarted kubelet does.
package hollownode

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
	"github.com/attachdetach-controller/attachdetach-controller/internal/proc"
)

// readyLine is what kubelet logs once it has started its sync loop.
const readyLine = `"Started kubelet"`

const (
	// readyTimeout bounds Start's wait for readyLine.
	readyTimeout = time.Minute
	// stopGracePeriod is how long Stop waits after SIGTERM before SIGKILL.
	stopGracePeriod = 5 * time.Second
)

// Options configures a hollow node.
type Options struct {
	// Binary is the hollow-kubelet executable; by default binaries.Tool's, built on
	// first use.
	Binary string
	// Kubeconfig is the path of the kubeconfig kubelet uses. Required.
	Kubeconfig string
	// Name is the node's name. Required.
	Name string
	// RootDir is kubelet's root directory, created if missing. Required. Keep it
	// short: the plugin sockets live under it, and a unix socket path has at most
	// 107 bytes.
	RootDir string
	// LogFile receives kubelet's output, appended. Required.
	LogFile string
	// NodeStatusUpdateFrequency is how often kubelet computes its node status,
	// volumesInUse included, and writes it when it changed; 0 keeps kubelet's 10s.
	NodeStatusUpdateFrequency time.Duration
	// NodeLeaseDuration is the node lease's duration, renewed every quarter of it;
	// 0 keeps kubelet's 40s.
	NodeLeaseDuration time.Duration
	// Verbosity is kubelet's -v; 0 means 2.
	Verbosity int
}

// Node is one hollow node's kubelet as a child process. It is not safe for
// concurrent use.
type Node struct {
	opts Options
	port int
	// proc is the process, or the last one; nil before the first Start.
	proc *proc.Process
}

// New prepares a hollow node without starting it: it builds hollow-kubelet if
// opts.Binary is empty, creates the root directory and its plugin registration
// directory, and picks the kubelet port the node keeps across restarts.
func New(ctx context.Context, opts Options) (*Node, error) {
	if opts.Kubeconfig == "" || opts.Name == "" || opts.RootDir == "" || opts.LogFile == "" {
		return nil, errors.New("a hollow node needs a Kubeconfig, a Name, a RootDir and a LogFile")
	}
	if opts.Binary == "" {
		bin, err := binaries.Tool(ctx, binaries.HollowKubelet)
		if err != nil {
			return nil, err
		}
		opts.Binary = bin
	}
	n := &Node{opts: opts}
	if err := os.MkdirAll(n.RegistryDir(), 0o750); err != nil {
		return nil, fmt.Errorf("creating the plugin registration directory of %s: %w", opts.Name, err)
	}
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("choosing the kubelet port of %s: %w", opts.Name, err)
	}
	n.port = port
	return n, nil
}

func (n *Node) args() []string {
	args := []string{
		"--kubeconfig=" + n.opts.Kubeconfig,
		"--name=" + n.opts.Name,
		"--root-dir=" + n.opts.RootDir,
		"--kubelet-port=" + strconv.Itoa(n.port),
		"-v=" + strconv.Itoa(cmp.Or(n.opts.Verbosity, 2)),
	}
	if n.opts.NodeStatusUpdateFrequency > 0 {
		args = append(args, "--node-status-update-frequency="+n.opts.NodeStatusUpdateFrequency.String())
	}
	if n.opts.NodeLeaseDuration > 0 {
		args = append(args, "--node-lease-duration-seconds="+strconv.Itoa(int(n.opts.NodeLeaseDuration/time.Second)))
	}
	return args
}

// Start starts kubelet, the first time or again after Kill or Stop, and waits until
// it has started its sync loop. Registering the node and the CSI driver follows
// shortly after; watch the API server for them.
func (n *Node) Start(ctx context.Context) error {
	if n.Running() {
		return fmt.Errorf("start the kubelet of %s: already running as pid %d", n.opts.Name, n.proc.Pid())
	}
	p, err := proc.Start("the kubelet of "+n.opts.Name, n.opts.LogFile, n.opts.Binary, n.args()...)
	if err != nil {
		return err
	}
	n.proc = p
	klog.FromContext(ctx).V(1).Info("Started a hollow kubelet", "node", n.opts.Name, "pid", p.Pid(), "port", n.port, "log", n.opts.LogFile)
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := p.WaitReady(ctx, readyLine); err != nil {
		_ = p.Kill()
		return fmt.Errorf("starting the kubelet of %s (log %s): %w", n.opts.Name, n.opts.LogFile, err)
	}
	return nil
}

// RegistryDir is kubelet's plugin registration directory, <root>/plugins_registry,
// where a CSI driver's node plugin puts its registration socket.
func (n *Node) RegistryDir() string { return filepath.Join(n.opts.RootDir, "plugins_registry") }

// LogFile is the path of kubelet's log.
func (n *Node) LogFile() string { return n.opts.LogFile }

// Running tells whether kubelet is running.
func (n *Node) Running() bool { return n.proc != nil && n.proc.Running() }

// Kill ends kubelet with SIGKILL, as a crash or a lost machine would, and waits for it.
func (n *Node) Kill() error {
	if n.proc == nil {
		return nil
	}
	return n.proc.Kill()
}

// Stop asks kubelet to stop with SIGTERM, kills it after a grace period, and waits for it.
func (n *Node) Stop() error {
	if n.proc == nil {
		return nil
	}
	return n.proc.Stop(stopGracePeriod)
}

// LogTail returns the last lines of kubelet's log.
func (n *Node) LogTail(lines int) string { return proc.LogTail(n.opts.LogFile, lines) }

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
