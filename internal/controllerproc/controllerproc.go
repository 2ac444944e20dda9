// Package controllerproc runs the attachdetach-controller as a child process (see
// internal/proc), the way the suites and the local cluster do: with a kubeconfig, a
// log file and the flags they vary, killed and started again at will.
package controllerproc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
	"github.com/attachdetach-controller/attachdetach-controller/internal/proc"
)

// readyLine is what the controller logs once it has rebuilt its state from the API
// server and starts reconciling.
const readyLine = `"State rebuilt, starting to reconcile"`

const (
	// readyTimeout bounds WaitReady.
	readyTimeout = time.Minute
	// stopGracePeriod is how long Stop waits after SIGTERM before SIGKILL.
	stopGracePeriod = 10 * time.Second
)

// Options configures the controller process.
type Options struct {
	// Binary is the controller executable; by default binaries.Controller's.
	Binary string
	// Kubeconfig is the path of the kubeconfig the controller uses. Required.
	Kubeconfig string
	// LogFile receives the controller's output, appended. Required.
	LogFile string
	// LeaderElect runs the controller with leader election, as in production.
	LeaderElect bool
	// HTTPEndpoint is the host:port of its probes and metrics (--http-endpoint);
	// empty: none, port 0: any free port, which HTTPAddress tells.
	HTTPEndpoint string
	// SecureHTTP serves HTTPEndpoint over HTTPS to the requests the API server
	// authorizes, as in production; false adds --http-endpoint-insecure, for
	// the tests and tools that scrape the endpoint without a token.
	SecureHTTP bool
	// Verbosity is the controller's -v; 0 means 4.
	Verbosity int
	// Args are more flags, appended: where they repeat a flag above, they win.
	Args []string
}

func (o Options) args() []string {
	args := []string{
		"--kubeconfig=" + o.Kubeconfig,
		"--http-endpoint=" + o.HTTPEndpoint,
		"--leader-elect=" + strconv.FormatBool(o.LeaderElect),
		"-v=" + strconv.Itoa(cmp.Or(o.Verbosity, 4)),
	}
	if !o.SecureHTTP {
		args = append(args, "--http-endpoint-insecure")
	}
	return append(args, o.Args...)
}

// Controller is the attachdetach-controller as a child process, in its own process
// group. It can be killed and started again; its output goes on being appended to
// the same log file. It is not safe for concurrent use.
type Controller struct {
	opts Options
	// proc is the process, or the last one; nil before the first start.
	proc *proc.Process
}

// New prepares a controller process without starting it, building the controller if
// opts.Binary is empty.
func New(ctx context.Context, opts Options) (*Controller, error) {
	if opts.Kubeconfig == "" || opts.LogFile == "" {
		return nil, errors.New("the controller needs a Kubeconfig and a LogFile")
	}
	if opts.Binary == "" {
		bin, err := binaries.Controller(ctx)
		if err != nil {
			return nil, err
		}
		opts.Binary = bin
	}
	return &Controller{opts: opts}, nil
}

// Start starts the controller process, the first time or again after Kill or Stop.
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
	return nil
}

// WaitReady waits until the controller has rebuilt its state and reconciles, for at
// most a minute. A controller that does not get there is killed.
func (c *Controller) WaitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := c.proc.WaitReady(ctx, readyLine); err != nil {
		_ = c.Kill()
		return fmt.Errorf("starting the controller (log %s): %w", c.opts.LogFile, err)
	}
	return nil
}

// Process is the controller's process, or the last one; nil before the first Start.
func (c *Controller) Process() *proc.Process { return c.proc }

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
func (c *Controller) Kill() error {
	if c.proc == nil {
		return nil
	}
	return c.proc.Kill()
}

// Stop asks the controller to stop with SIGTERM (it then gives up its leader lease),
// kills it if it is still there after a grace period, and waits for it.
func (c *Controller) Stop() error {
	if c.proc == nil {
		return nil
	}
	return c.proc.Stop(stopGracePeriod)
}

// Log returns the controller's log, klog's escaped quotes inside values unescaped,
// so that API errors read as the API server wrote them.
func (c *Controller) Log() (string, error) {
	data, err := os.ReadFile(c.opts.LogFile)
	if err != nil {
		return "", fmt.Errorf("reading the controller's log: %w", err)
	}
	return strings.ReplaceAll(string(data), `\"`, `"`), nil
}

// FindInLog returns the submatches of the first match of re in the controller's log
// (see Log), nil if there is none yet.
func (c *Controller) FindInLog(re *regexp.Regexp) []string {
	log, err := c.Log()
	if err != nil {
		return nil
	}
	return re.FindStringSubmatch(log)
}

// identityLine is what the controller logs, with its identity, when leader election
// starts.
var identityLine = regexp.MustCompile(`"Waiting to become the leader" .*identity="([^"]+)"`)

// Identity returns the controller's identity in its leader Lease, from its log; ""
// until it has logged it.
func (c *Controller) Identity() string {
	if m := c.FindInLog(identityLine); m != nil {
		return m[1]
	}
	return ""
}

// httpLine is what the controller logs, with the address, once its HTTP server
// listens.
var httpLine = regexp.MustCompile(`"Serving probes and metrics" address="([^"]+)"`)

// HTTPAddress returns the host:port the controller's probes and metrics listen on,
// from its log; "" until it has logged it. After a restart it is the first
// process's address: give a fixed port to a controller that restarts.
func (c *Controller) HTTPAddress() string {
	if m := c.FindInLog(httpLine); m != nil {
		return m[1]
	}
	return ""
}

// LogTail returns the last lines of the controller's log.
func (c *Controller) LogTail(lines int) string { return proc.LogTail(c.opts.LogFile, lines) }
