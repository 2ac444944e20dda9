package proc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startShell runs a shell script as a Process logging to logPath; the test kills it
// at the end.
func startShell(t *testing.T, logPath, script string) *Process {
	t.Helper()
	p, err := Start("sh", logPath, "/bin/sh", "-c", script)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	return p
}

func TestWaitReadyReadsOnlyItsOwnOutput(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "sh.log")
	if err := os.WriteFile(logPath, []byte("ready from an earlier run\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startShell(t, logPath, "sleep 0.2; echo ready now; exec sleep 60")
	ctx := t.Context()
	if err := p.WaitReady(ctx, "ready now"); err != nil {
		t.Fatal(err)
	}
	if !p.Running() || p.Exited() != nil {
		t.Fatalf("process not running after it was ready: %v", p.Exited())
	}
	want := "ready from an earlier run\n+ /bin/sh -c sleep 0.2; echo ready now; exec sleep 60\nready now"
	if got := p.LogTail(3); got != want {
		t.Errorf("LogTail(3) = %q, want %q", got, want)
	}
	if got := p.LogTail(1); got != "ready now" {
		t.Errorf("LogTail(1) = %q, want the last line", got)
	}
}

func TestWaitReadyFailsWhenTheProcessExits(t *testing.T) {
	p := startShell(t, filepath.Join(t.TempDir(), "sh.log"), "echo giving up; exit 3")
	err := p.WaitReady(t.Context(), "never logged")
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready: exit status 3") || !strings.Contains(err.Error(), "giving up") {
		t.Fatalf("WaitReady = %v, want an early exit with the log tail", err)
	}
	if err := p.Exited(); err == nil || err.Error() != "sh exited: exit status 3" {
		t.Errorf("Exited() = %v, want sh exited: exit status 3", err)
	}
}

func TestStopKillsAfterTheGracePeriod(t *testing.T) {
	// The shell ignores SIGTERM, and so does the sleep it starts in its process group.
	p := startShell(t, filepath.Join(t.TempDir(), "sh.log"), "trap '' TERM; echo trapped; sleep 60; true")
	if err := p.WaitReady(t.Context(), "trapped"); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	if err := p.Stop(200 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took < 200*time.Millisecond {
		t.Errorf("Stop returned after %s, before the grace period", took)
	}
	if p.Running() {
		t.Error("process still running after Stop")
	}
	if err := p.Signal(0); err != nil {
		t.Errorf("Signal after exit = %v, want nil", err)
	}
}

func TestStopEndsTheProcessWithSIGTERM(t *testing.T) {
	p := startShell(t, filepath.Join(t.TempDir(), "sh.log"), "exec sleep 60")
	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.Err(); err == nil || err.Error() != "signal: terminated" {
		t.Errorf("Err() = %v, want signal: terminated", err)
	}
}

func TestLogTailOfMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing.log")
	if got := LogTail(path, 5); !strings.HasPrefix(got, "(cannot read "+path) {
		t.Errorf("LogTail = %q, want a note that the file cannot be read", got)
	}
}
