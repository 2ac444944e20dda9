package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/internal/proc"
	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
)

// controllerReadyLine is what the controller logs once it has rebuilt its state from
// the API server and starts reconciling.
const controllerReadyLine = `"State rebuilt, starting to reconcile"`

const (
	// controllerStartTimeout bounds the wait for the controller to be ready.
	controllerStartTimeout = time.Minute
	// controllerStopGracePeriod is how long Stop waits after SIGTERM before SIGKILL.
	controllerStopGracePeriod = 10 * time.Second
)

// ControllerOptions configures the controller process.
type ControllerOptions struct {
	// Binary is the controller executable; by default BuildController's.
	Binary string
	// Kubeconfig is the path of the kubeconfig the controller uses. The cluster sets
	// it to its admin kubeconfig.
	Kubeconfig string
	// LogFile receives the controller's output, appended. The cluster puts it in its
	// directory by default.
	LogFile string
	// LeaderElect runs the controller with leader election, as in production.
	LeaderElect bool
	// BindAddress is the address of its probes and metrics; empty: none.
	BindAddress string
	// Verbosity is the controller's -v; 0 means 4.
	Verbosity int
	// Args are more flags, appended.
	Args []string
}

func (o ControllerOptions) args() []string {
	verbosity := o.Verbosity
	if verbosity == 0 {
		verbosity = 4
	}
	args := []string{
		"--kubeconfig=" + o.Kubeconfig,
		"--bind-address=" + o.BindAddress,
		"--leader-elect=" + strconv.FormatBool(o.LeaderElect),
		"-v=" + strconv.Itoa(verbosity),
	}
	return append(args, o.Args...)
}

// Controller is the attachdetach-controller running as a child process, in its own
// process group. It can be killed and started again. It is not safe for concurrent
// use.
type Controller struct {
	opts ControllerOptions
	// proc is the process, or the last one; nil before the first start.
	proc *proc.Process
}

// StartController builds the controller if opts.Binary is empty, starts it and waits
// until it is ready (its state rebuilt).
func StartController(ctx context.Context, opts ControllerOptions) (*Controller, error) {
	if opts.Kubeconfig == "" || opts.LogFile == "" {
		return nil, errors.New("start the controller: Kubeconfig and LogFile are required")
	}
	if opts.Binary == "" {
		bin, err := BuildController(ctx)
		if err != nil {
			return nil, err
		}
		opts.Binary = bin
	}
	c := &Controller{opts: opts}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Start starts the controller process again after Kill or Stop, and waits until it is
// ready. Its output goes on being appended to the same log file.
func (c *Controller) Start(ctx context.Context) error {
	if c.Running() {
		return fmt.Errorf("start the controller: already running as pid %d", c.Pid())
	}
	p, err := proc.Start("the controller", c.opts.LogFile, c.opts.Binary, c.opts.args()...)
	if err != nil {
		return err
	}
	c.proc = p
	klog.FromContext(ctx).V(1).Info("Started the controller", "pid", p.Pid(), "log", c.opts.LogFile)
	ctx, cancel := context.WithTimeout(ctx, controllerStartTimeout)
	defer cancel()
	if err := p.WaitReady(ctx, controllerReadyLine); err != nil {
		c.Kill()
		return fmt.Errorf("starting the controller (log %s): %w", c.opts.LogFile, err)
	}
	return nil
}

// Running tells whether the process is running.
func (c *Controller) Running() bool {
	return c.proc != nil && c.proc.Running()
}

// Pid is the ID of the process, or of the last one.
func (c *Controller) Pid() int {
	if c.proc == nil {
		return 0
	}
	return c.proc.Pid()
}

// LogFile is the path of the controller's log.
func (c *Controller) LogFile() string { return c.opts.LogFile }

// Kill ends the controller with SIGKILL, no clean-up of any kind, and waits for it.
func (c *Controller) Kill() {
	if c.proc != nil {
		_ = c.proc.Kill()
	}
}

// Stop asks the controller to stop with SIGTERM (it then gives up its leader lease),
// kills it if it is still there after a grace period, and waits for it.
func (c *Controller) Stop() {
	if c.proc != nil {
		_ = c.proc.Stop(controllerStopGracePeriod)
	}
}

// LogTail returns the last lines of the controller's log.
func (c *Controller) LogTail(lines int) string { return proc.LogTail(c.opts.LogFile, lines) }

// BuildController builds ./cmd/attachdetach-controller of this repository into a
// cache directory ($XDG_CACHE_HOME/attachdetach-controller/bin) and returns its path.
// go build leaves an up-to-date binary alone, so a later call costs a fraction of a
// second; concurrent calls from several processes take turns.
func BuildController(ctx context.Context) (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := binDir()
	if err != nil {
		return "", err
	}
	unlock, err := lockFile(filepath.Join(dir, ".build.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	bin := filepath.Join(dir, "attachdetach-controller")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/attachdetach-controller")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the controller: %w\n%s", err, out)
	}
	return bin, nil
}

func binDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "attachdetach-controller", "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating the binary cache %s: %w", dir, err)
	}
	return dir, nil
}

// lockFile takes an exclusive lock on path, creating it, and returns its release.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("taking lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
