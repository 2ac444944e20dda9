package integration

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestCommandLine runs the binary for --version and for bad flags: a version line
// and exit 0, or a message naming the flag and exit 2, without touching a cluster.
func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		wantCode int
		want     string
	}{
		{args: []string{"--version"}, wantCode: 0, want: "attachdetach-controller "},
		{args: []string{"--kube-api-qps=-1"}, wantCode: 2, want: "--kube-api-qps must be positive"},
		{args: []string{"--leader-elect", "--leader-elect-lease-duration=5s"}, wantCode: 2, want: "--leader-elect-lease-duration (5s) must be longer than --leader-elect-renew-deadline (10s)"},
	} {
		out, err := exec.Command(env.Controller, tc.args...).CombinedOutput()
		code := 0
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			code = exitErr.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.wantCode || !strings.Contains(string(out), tc.want) {
			t.Errorf("%q: exit %d, output %q; want exit %d and %q", tc.args, code, out, tc.wantCode, tc.want)
		}
	}
}
