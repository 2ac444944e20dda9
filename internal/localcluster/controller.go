package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

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
	cmd  *exec.Cmd
	done chan struct{}
	err  error
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
	logFile, err := os.OpenFile(c.opts.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening the controller log: %w", err)
	}
	defer logFile.Close()
	offset, err := logFile.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("seeking to the end of the controller log: %w", err)
	}
	args := c.opts.args()
	if _, err := fmt.Fprintf(logFile, "+ %s %s\n", c.opts.Binary, strings.Join(args, " ")); err != nil {
		return fmt.Errorf("writing the controller log: %w", err)
	}
	cmd := exec.Command(c.opts.Binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, so that Ctrl-C in a terminal reaches only the program
	// that started it, which stops it in order; killed if that program dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the controller %s: %w", c.opts.Binary, err)
	}
	c.cmd, c.done, c.err = cmd, make(chan struct{}), nil
	go func(done chan struct{}) {
		c.err = cmd.Wait()
		close(done)
	}(c.done)
	klog.FromContext(ctx).V(1).Info("Started the controller", "pid", cmd.Process.Pid, "log", c.opts.LogFile)
	if err := c.waitReady(ctx, offset); err != nil {
		c.Kill()
		return fmt.Errorf("starting the controller (log %s): %w", c.opts.LogFile, err)
	}
	return nil
}

// waitReady waits until the controller logs, after offset, that it is ready.
func (c *Controller) waitReady(ctx context.Context, offset int64) error {
	ctx, cancel := context.WithTimeout(ctx, controllerStartTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		data, err := os.ReadFile(c.opts.LogFile)
		if err != nil {
			return fmt.Errorf("reading the log: %w", err)
		}
		if int64(len(data)) > offset && bytes.Contains(data[offset:], []byte(controllerReadyLine)) {
			return nil
		}
		select {
		case <-c.done:
			return fmt.Errorf("exited before it was ready: %v\n%s", c.err, c.LogTail(20))
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w\n%s", ctx.Err(), c.LogTail(20))
		case <-tick.C:
		}
	}
}

// Running tells whether the process is running.
func (c *Controller) Running() bool {
	if c.done == nil {
		return false
	}
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// Pid is the ID of the process, or of the last one.
func (c *Controller) Pid() int {
	if c.cmd == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

// LogFile is the path of the controller's log.
func (c *Controller) LogFile() string { return c.opts.LogFile }

// Kill ends the controller with SIGKILL, no clean-up of any kind, and waits for it.
func (c *Controller) Kill() {
	if !c.Running() {
		return
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	<-c.done
}

// Stop asks the controller to stop with SIGTERM (it then gives up its leader lease),
// kills it if it is still there after a grace period, and waits for it.
func (c *Controller) Stop() {
	if !c.Running() {
		return
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(controllerStopGracePeriod):
		c.Kill()
	}
}

// LogTail returns the last lines of the controller's log.
func (c *Controller) LogTail(lines int) string {
	data, err := os.ReadFile(c.opts.LogFile)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", c.opts.LogFile, err)
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

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
