package e2e

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestWaitingForDetachEventsWithKubectl reads the "Waiting for detach" events back with the real
// `kubectl events --for pod/NAME -n NS` and matches them against the contract's text:
// naming the pod that holds the volume, and, once no pod holds it but it is still
// attached (the first node is unmounting), saying it is exclusively attached.
func TestWaitingForDetachEventsWithKubectl(t *testing.T) {
	c := newCluster(t, clusterOptions{nodes: 3, unmountDelay: 3 * time.Second})
	a, b, third := c.Nodes[0], c.Nodes[1], c.Nodes[2]
	v := c.AttachedVolume("data", "holder", a)

	c.CreatePod("waiter", b, v.Claim)
	usedBy := `Waiting for detach for volume "` + v.PV + `" Volume is already used by pod(s) holder`
	c.WaitEvent("waiter", "Warning FailedAttachVolume "+usedBy)
	c.expectKubectlEvent("waiter", "Warning", "FailedAttachVolume", usedBy)

	// The holder stops; while its node unmounts, the volume is attached with no pod.
	c.DeletePod("holder")
	c.Eventually("the holder's containers stopped", func() bool {
		pod, err := c.Client.CoreV1().Pods(c.Namespace).Get(t.Context(), "holder", metav1.GetOptions{})
		c.Must(err)
		return pod.DeletionTimestamp != nil && !slices.ContainsFunc(pod.Status.ContainerStatuses, func(s corev1.ContainerStatus) bool {
			return s.State.Running != nil
		})
	})
	c.CreatePod("late", third, v.Claim)
	exclusive := `Waiting for detach for volume "` + v.PV + `" Volume is already exclusively attached to one node, waiting on detach before it can be attached to another node`
	c.WaitEvent("late", "Warning FailedAttachVolume "+exclusive)
	c.expectKubectlEvent("late", "Warning", "FailedAttachVolume", exclusive)
}

// columns splits a line of kubectl's table output into its columns.
var columns = regexp.MustCompile(`\s{2,}`)

// expectKubectlEvent runs `kubectl events --for pod/NAME -n NS` and looks for a row
// with the type, reason and message.
func (c *cluster) expectKubectlEvent(pod, eventType, reason, message string) {
	c.T.Helper()
	out := c.kubectl("events", "--for", "pod/"+pod, "-n", c.Namespace)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if header := columns.Split(lines[0], -1); !slices.Equal(header, []string{"LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"}) {
		c.T.Fatalf("kubectl events header %q, want LAST SEEN, TYPE, REASON, OBJECT, MESSAGE:\n%s", header, out)
	}
	want := []string{eventType, reason, "Pod/" + pod, message}
	for _, line := range lines[1:] {
		if row := columns.Split(line, 5); len(row) == 5 && slices.Equal(row[1:], want) {
			return
		}
	}
	c.T.Fatalf("kubectl events --for pod/%s shows no row %q:\n%s", pod, want, out)
}
