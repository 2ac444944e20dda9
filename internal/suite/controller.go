package suite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/attachdetach-controller/attachdetach-controller/internal/controllerproc"
	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
)

// WaitLog waits until the controller's log has a match for pattern and returns the
// match's first group ("" if pattern has none). It fails the test if the controller
// exits first.
func WaitLog(t testing.TB, c *controllerproc.Controller, timeout time.Duration, pattern string) string {
	t.Helper()
	re := regexp.MustCompile(pattern)
	var m []string
	Eventually(t, timeout, fmt.Sprintf("the controller to log %q", pattern), func() bool {
		m = c.FindInLog(re)
		return m != nil || !c.Running()
	})
	if m == nil {
		t.Fatalf("the controller exited before logging %q", pattern)
	}
	if len(m) < 2 {
		return ""
	}
	return m[1]
}

// LeaseHolder returns the holder of the Lease namespace/name, "" if it has none or
// does not exist.
func LeaseHolder(ctx context.Context, client kubernetes.Interface, namespace, name string) string {
	l, err := client.CoordinationV1().Leases(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// WaitIdentity waits until the controller has logged its identity in its leader
// Lease, and returns it.
func WaitIdentity(t testing.TB, c *controllerproc.Controller) string {
	t.Helper()
	var id string
	Eventually(t, WaitTimeout, "the controller to log its leader identity", func() bool {
		id = c.Identity()
		return id != ""
	})
	return id
}

// KeepLogOnFailure copies a log file, if it was written, into the control plane's
// directory when the test fails, where testenv keeps the logs of failed runs and
// says so.
func KeepLogOnFailure(t testing.TB, env *testenv.Env, name, path string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return
		}
		if err == nil {
			dest := filepath.Join(env.Dir, strings.ReplaceAll(t.Name(), "/", "_")+"-"+name+".log")
			err = os.WriteFile(dest, data, 0o644)
			t.Logf("%s log kept in %s", name, dest)
		}
		if err != nil {
			t.Logf("keeping the %s log: %v", name, err)
		}
	})
}

// WaitLeader waits until the controller holds the Lease namespace/name and returns
// when it saw it.
func WaitLeader(t testing.TB, client kubernetes.Interface, c *controllerproc.Controller, namespace, lease string, timeout time.Duration) time.Time {
	t.Helper()
	id := WaitIdentity(t, c)
	Eventually(t, timeout, fmt.Sprintf("%s to hold lease %s/%s", id, namespace, lease), func() bool {
		return LeaseHolder(context.Background(), client, namespace, lease) == id
	})
	return time.Now()
}
