package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/attachdetach-controller/attachdetach-controller/internal/localcluster"
	"github.com/attachdetach-controller/attachdetach-controller/test/csidriver"
)

const (
	waitTimeout = 30 * time.Second
	pollEvery   = 20 * time.Millisecond
	// cleanupTimeout bounds the wait for a test's VolumeAttachments to go.
	cleanupTimeout = 30 * time.Second
)

// cluster is one test's world on the package's control plane: its own CSI driver
// name, nodes, namespace, csi-attacher, kubelet stand-in and controller.
type cluster struct {
	*localcluster.Cluster
	t   *testing.T
	ctx context.Context
	ns  string
}

type clusterOptions struct {
	nodes        int
	unmountDelay time.Duration
}

func newCluster(t *testing.T, opts clusterOptions) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("runs kube-apiserver, csi-attacher and the controller")
	}
	if opts.nodes == 0 {
		opts.nodes = 2
	}
	_, ctx := ktesting.NewTestContext(t)
	id := rand.String(5)
	var nodes []string
	for i := range opts.nodes {
		nodes = append(nodes, fmt.Sprintf("e2e-%s-%c", id, 'a'+i))
	}
	began := time.Now()
	lc, err := localcluster.Start(ctx, localcluster.Options{
		Env:                env,
		Nodes:              nodes,
		DriverName:         id + ".csi.e2e.example.com",
		UnmountDelay:       opts.unmountDelay,
		AttacherTimeout:    10 * time.Second,
		AttacherRetryStart: 100 * time.Millisecond,
		AttacherRetryMax:   2 * time.Second,
		Controller:         localcluster.ControllerOptions{Binary: controllerBinary},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster %s up in %s", id, time.Since(began).Round(time.Millisecond))
	c := &cluster{Cluster: lc, t: t, ctx: ctx, ns: "e2e-" + id}
	t.Cleanup(c.cleanup)
	c.must(c.CreateNamespace(ctx, c.ns))
	return c
}

// cleanup deletes the test's pods and waits for its VolumeAttachments to go while
// csi-attacher still runs, so that no finalizer is left behind for the next tests,
// checks that the driver never refused a second node, and stops everything.
func (c *cluster) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	c.Driver.ClearFaults()
	c.Driver.SetDelay(0)
	if !c.Controller.Running() {
		if err := c.Controller.Start(ctx); err != nil {
			c.t.Error(err)
		}
	}
	if err := c.Client.CoreV1().Pods(c.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		c.t.Errorf("cleanup: deleting the pods: %v", err)
	}
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		vas, err := c.Attachments(ctx)
		return err == nil && len(vas) == 0, nil
	})
	if err != nil {
		vas, _ := c.Attachments(context.Background())
		c.t.Errorf("cleanup: VolumeAttachments still there: %v", attachmentNames(vas))
	}
	if conflicts := c.Driver.Conflicts(); len(conflicts) > 0 {
		c.t.Errorf("the driver refused ControllerPublishVolume of single-node volumes already published elsewhere: %+v", conflicts)
	}
	if c.t.Failed() {
		c.t.Logf("controller log tail:\n%s", c.Controller.LogTail(80))
		c.t.Logf("csi-attacher log tail:\n%s", c.Attacher.LogTail(40))
	}
	c.Stop()
}

func (c *cluster) must(err error) {
	c.t.Helper()
	if err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) createVolume(claim string, mode corev1.PersistentVolumeAccessMode) localcluster.Volume {
	c.t.Helper()
	v, err := c.CreateVolume(c.ctx, c.ns, claim, mode)
	c.must(err)
	return v
}

func (c *cluster) createPod(name, node string, claims ...string) {
	c.t.Helper()
	c.must(c.CreatePod(c.ctx, c.ns, name, node, claims...))
}

func (c *cluster) deletePod(name string) {
	c.t.Helper()
	c.must(c.DeletePod(c.ctx, c.ns, name))
}

// eventually polls cond until it holds, failing the test after waitTimeout.
func (c *cluster) eventually(what string, cond func() (bool, error)) {
	c.t.Helper()
	var lastErr error
	err := wait.PollUntilContextTimeout(c.ctx, pollEvery, waitTimeout, true, func(context.Context) (bool, error) {
		ok, err := cond()
		lastErr = err
		return ok && err == nil, nil
	})
	if err != nil {
		c.t.Fatalf("waiting for %s: %v (last error: %v)", what, err, lastErr)
	}
}

func (c *cluster) attachment(v localcluster.Volume, node string) *storagev1.VolumeAttachment {
	c.t.Helper()
	va, err := c.Attachment(c.ctx, v, node)
	c.must(err)
	return va
}

// waitAttached waits until the node's status lists the volume as attached.
func (c *cluster) waitAttached(v localcluster.Volume, node string) {
	c.t.Helper()
	c.eventually(fmt.Sprintf("%s in the volumesAttached of %s", v.PV, node), func() (bool, error) {
		attached, _, err := c.InNodeStatus(c.ctx, node, v)
		return attached, err
	})
}

// waitDetached waits until the VolumeAttachment is gone and node status no longer
// lists the volume.
func (c *cluster) waitDetached(v localcluster.Volume, node string) {
	c.t.Helper()
	c.eventually(fmt.Sprintf("%s detached from %s", v.PV, node), func() (bool, error) {
		va, err := c.Attachment(c.ctx, v, node)
		if err != nil || va != nil {
			return false, err
		}
		attached, _, err := c.InNodeStatus(c.ctx, node, v)
		return !attached, err
	})
}

func (c *cluster) waitPodRunning(name string) {
	c.t.Helper()
	c.eventually("pod "+name+" Running", func() (bool, error) {
		pod, err := c.Client.CoreV1().Pods(c.ns).Get(c.ctx, name, metav1.GetOptions{})
		return err == nil && pod.Status.Phase == corev1.PodRunning, err
	})
}

// podEvents returns "Type Reason Message" of the events on a pod, read back through
// the API.
func (c *cluster) podEvents(pod string) []string {
	c.t.Helper()
	list, err := c.Client.CoreV1().Events(c.ns).List(c.ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", pod).String(),
	})
	c.must(err)
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Type+" "+e.Reason+" "+e.Message)
	}
	return out
}

// waitEvent waits for an event on the pod for which match holds and returns it.
func (c *cluster) waitEvent(pod, what string, match func(event string) bool) string {
	c.t.Helper()
	var found string
	c.eventually(fmt.Sprintf("event on pod %s: %s", pod, what), func() (bool, error) {
		i := slices.IndexFunc(c.podEvents(pod), match)
		if i >= 0 {
			found = c.podEvents(pod)[i]
		}
		return i >= 0, nil
	})
	return found
}

// publishes returns the recorded ControllerPublishVolume calls on the volume that
// ended with code on node.
func (c *cluster) publishes(v localcluster.Volume, node string, code codes.Code) []csidriver.Call {
	return callsWith(c.Driver.CallsFor(csidriver.OpPublish, v.Handle), c.NodeID(node), code)
}

func (c *cluster) unpublishes(v localcluster.Volume, node string, code codes.Code) []csidriver.Call {
	return callsWith(c.Driver.CallsFor(csidriver.OpUnpublish, v.Handle), c.NodeID(node), code)
}

func callsWith(calls []csidriver.Call, nodeID string, code codes.Code) []csidriver.Call {
	return slices.DeleteFunc(calls, func(call csidriver.Call) bool { return call.NodeID != nodeID || call.Code != code })
}

// kubectl runs the real kubectl with the admin kubeconfig and returns its output.
func (c *cluster) kubectl(args ...string) string {
	c.t.Helper()
	cmd := exec.CommandContext(c.ctx, kubectl, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		c.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

func attachmentNames(vas []storagev1.VolumeAttachment) []string {
	names := make([]string, 0, len(vas))
	for _, va := range vas {
		names = append(names, va.Name+" on "+va.Spec.NodeName)
	}
	return names
}
