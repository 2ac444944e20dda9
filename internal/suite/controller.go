package suite

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/attachdetach-controller/attachdetach-controller/internal/controllerproc"
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

// WaitLeader waits until the controller holds the Lease namespace/name and returns
// when it saw it.
func WaitLeader(t testing.TB, client kubernetes.Interface, c *controllerproc.Controller, namespace, lease string, timeout time.Duration) time.Time {
	t.Helper()
	var id string
	Eventually(t, WaitTimeout, "the controller to log its leader identity", func() bool {
		id = c.Identity()
		return id != ""
	})
	Eventually(t, timeout, fmt.Sprintf("%s to hold lease %s/%s", id, namespace, lease), func() bool {
		return LeaseHolder(context.Background(), client, namespace, lease) == id
	})
	return time.Now()
}
