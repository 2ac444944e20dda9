// Package proc runs a binary as a child process for tests and local tools: in its own
// process group, so that a signal reaches everything it starts; killed should the
// program that started it die first; its output appended to a log file.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

const (
	// killTimeout bounds the wait for a process to be reaped after SIGKILL.
	killTimeout = 10 * time.Second
	// readyPollInterval is how often WaitReady reads the log.
	readyPollInterval = 50 * time.Millisecond
)

// Process is a child process started by Start.
type Process struct {
	name    string
	logPath string
	// logStart is where the process output starts in the log, after the command line.
	logStart int64
	cmd      *exec.Cmd
	done     chan struct{}
	err      error
}

// Start runs binary with args, its output appended to logPath after a line with the
// command. name is what errors call the process.
func Start(name, logPath, binary string, args ...string) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening %s log: %w", name, err)
	}
	defer logFile.Close()
	if _, err := fmt.Fprintf(logFile, "+ %s %s\n", binary, strings.Join(args, " ")); err != nil {
		return nil, fmt.Errorf("writing %s log: %w", name, err)
	}
	logStart, err := logFile.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, fmt.Errorf("seeking to the end of %s log: %w", name, err)
	}
	p := &Process{name: name, logPath: logPath, logStart: logStart}
	if err := p.start(logFile, logFile, binary, args); err != nil {
		return nil, err
	}
	return p, nil
}

// StartAttached runs binary with args, its output going to this program's standard
// output and standard error, for a process the user watches. The process has no log:
// WaitReady and LogTail have nothing to read.
func StartAttached(name, binary string, args ...string) (*Process, error) {
	p := &Process{name: name}
	if err := p.start(os.Stdout, os.Stderr, binary, args); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Process) start(stdout, stderr *os.File, binary string, args []string) error {
	p.cmd = exec.Command(binary, args...)
	p.cmd.Stdout, p.cmd.Stderr = stdout, stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("starting %s %s: %w", p.name, binary, err)
	}
	p.done = make(chan struct{})
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return nil
}

// Pid is the process ID, also the ID of its process group.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// LogPath is the path of the process log.
func (p *Process) LogPath() string { return p.logPath }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err waits for the process to exit and returns how it did, as exec.Cmd.Wait.
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// Running tells whether the process has not exited yet.
func (p *Process) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Exited returns an error that tells how the process ended, or nil while it runs.
func (p *Process) Exited() error {
	if p.Running() {
		return nil
	}
	if p.err == nil {
		return fmt.Errorf("%s exited", p.name)
	}
	return fmt.Errorf("%s exited: %w", p.name, p.err)
}

// Signal sends sig to the process group. Once the process has exited it does
// nothing, since its ID may have been given to another.
func (p *Process) Signal(sig syscall.Signal) error {
	if !p.Running() {
		return nil
	}
	if err := syscall.Kill(-p.Pid(), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("sending %s to %s: %w", sig, p.name, err)
	}
	return nil
}

// Kill kills the process group with SIGKILL, no clean-up of any kind, and waits for
// the process to be reaped.
func (p *Process) Kill() error {
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(killTimeout):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, p.Pid())
	}
}

// Stop sends SIGTERM to the process group, kills it if the process is still there
// after grace, and waits for the process.
func (p *Process) Stop(grace time.Duration) error {
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return errors.Join(err, p.Kill())
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
		return p.Kill()
	}
}

// WaitReady waits until the process writes readyLine to its log, or fails when the
// process exits first or ctx ends.
func (p *Process) WaitReady(ctx context.Context, readyLine string) error {
	tick := time.NewTicker(readyPollInterval)
	defer tick.Stop()
	for {
		data, err := os.ReadFile(p.logPath)
		if err != nil {
			return fmt.Errorf("reading the log: %w", err)
		}
		if int64(len(data)) > p.logStart && bytes.Contains(data[p.logStart:], []byte(readyLine)) {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited before it was ready: %v\n%s", p.err, p.LogTail(20))
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w\n%s", ctx.Err(), p.LogTail(20))
		case <-tick.C:
		}
	}
}

// LogTail returns the last lines of the process log.
func (p *Process) LogTail(lines int) string { return LogTail(p.logPath, lines) }

// LogTail returns the last lines of the file at path, for error messages and test
// reports.
func LogTail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
