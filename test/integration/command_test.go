package integration

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestCommandLine runs the binary for --version, --help and bad flags (klog's
// file flags among them): a version
// line or the flags in groups and exit 0, or a message naming the flag and exit 2,
// without touching a cluster.
func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		wantCode int
		want     string
	}{
		{args: []string{"--version"}, wantCode: 0, want: "attachdetach-controller "},
		{args: []string{"--kube-api-qps=-1"}, wantCode: 2, want: "--kube-api-qps must be positive"},
		{args: []string{"--leader-elect", "--leader-elect-lease-duration=5s"}, wantCode: 2, want: "--leader-elect-lease-duration (5s) must be longer than --leader-elect-renew-deadline (10s)"},
		{args: []string{"--attach-detach-reconcile-sync-period=500ms"}, wantCode: 2, want: "--attach-detach-reconcile-sync-period must be at least 1s"},
		{args: []string{"--bind-address=:8080"}, wantCode: 2, want: "flag provided but not defined: -bind-address"},
		{args: []string{"--help"}, wantCode: 0, want: "Flags of kube-controller-manager (same name and meaning):"},
		{args: []string{"--logtostderr=false"}, wantCode: 2, want: "flag provided but not defined: -logtostderr"},
		{args: []string{"--logging-format=xml"}, wantCode: 2, want: `--logging-format: Invalid value: "xml": Unsupported log format`},
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
