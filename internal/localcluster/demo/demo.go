// Package demo plays a short story on a local cluster of hollow nodes (the real
// kubelet with a fake container runtime and mounter) and tells what happens at each
// step, as seen through the API server and by the CSI driver: a pod's ReadWriteOnce
// volume attached through a VolumeAttachment, csi-attacher and
// ControllerPublishVolume, then staged and published by kubelet, and the pod Running;
// a second pod on another node kept waiting with a "Waiting for detach" event (shown
// with the real kubectl); the volume moving once the first pod is gone and kubelet has
// unpublished and unstaged it; a ReadWriteMany volume on every node; and everything
// detached at the end.
package demo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/attachdetach-controller/attachdetach-controller/internal/csidriver"
	"github.com/attachdetach-controller/attachdetach-controller/internal/kubectl"
	"github.com/attachdetach-controller/attachdetach-controller/internal/localcluster"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

// Defaults of Options.
const (
	DefaultNamespace   = "demo"
	DefaultStepTimeout = time.Minute
)

// pollInterval is how often a step looks at the API server and the driver.
const pollInterval = 20 * time.Millisecond

// failedAttachEvent starts a FailedAttachVolume event as workload.PodEvents has it.
const failedAttachEvent = "Warning FailedAttachVolume "

// kubeletStatusPeriod is kubelet's default nodeStatusUpdateFrequency.
const kubeletStatusPeriod = 10 * time.Second

// Options configures the demo.
type Options struct {
	// Namespace is where the claims and pods go; DefaultNamespace if empty. The
	// PersistentVolumes are named after it.
	Namespace string
	// Kubectl is the kubectl executable used to show the pods' events. Required.
	Kubectl string
	// StepTimeout bounds the wait for each step; DefaultStepTimeout if zero.
	StepTimeout time.Duration
}

// Claims the demo creates, for the user to play with afterwards.
const (
	ClaimRWO = "data"
	ClaimRWX = "shared"
)

type demo struct {
	c *localcluster.Cluster
	// w makes the demo's volumes and pods.
	w     *workload.Workload
	out   io.Writer
	opts  Options
	began time.Time
}

// Run plays the demo on c, which needs at least two nodes, writing what happens to
// out. It leaves the namespace and its claims in place, and no pod.
func Run(ctx context.Context, c *localcluster.Cluster, out io.Writer, opts Options) error {
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if opts.StepTimeout == 0 {
		opts.StepTimeout = DefaultStepTimeout
	}
	if opts.Kubectl == "" {
		return errors.New("demo: the kubectl executable is required")
	}
	if len(c.Nodes) < 2 || c.Hollow == nil {
		return fmt.Errorf("demo: needs at least two hollow nodes, the cluster has %d nodes, hollow: %t", len(c.Nodes), c.Hollow != nil)
	}
	d := &demo{
		c:     c,
		w:     &workload.Workload{Client: c.Client, Namespace: opts.Namespace, Driver: c.DriverName},
		out:   out,
		opts:  opts,
		began: time.Now(),
	}
	s, err := d.setScene(ctx)
	if err != nil {
		return err
	}
	for _, part := range []func(context.Context, scene) error{d.attach, d.refuse, d.move, d.share, d.detachAll} {
		if err := part(ctx, s); err != nil {
			return err
		}
	}
	d.section("Done in %s", roundDuration(time.Since(d.began)))
	return nil
}

// scene is what the demo plays with.
type scene struct {
	rwo, rwx workload.Volume
	// first and second are the nodes the ReadWriteOnce volume moves between.
	first, second string
}

func (d *demo) setScene(ctx context.Context) (scene, error) {
	c, ns := d.c, d.opts.Namespace
	d.section("The cluster")
	d.say("CSIDriver %s: attachRequired true; csi-attacher handles its VolumeAttachments", c.DriverName)
	for _, node := range c.Nodes {
		d.say("node %s: its kubelet registered it Ready with %s=true; the driver's node plugin registered with kubelet, and the CSINode maps the node to driver node ID %s",
			node, sim.ControllerManagedAnnotation, c.NodeID(node))
	}
	if err := d.w.CreateNamespace(ctx); err != nil {
		return scene{}, err
	}
	s := scene{first: c.Nodes[0], second: c.Nodes[1]}
	var err error
	if s.rwo, err = d.w.CreateVolume(ctx, ClaimRWO, workload.VolumeOptions{}); err != nil {
		return s, err
	}
	d.say("claim %s/%s bound to PersistentVolume %s: ReadWriteOnce, volume handle %s", ns, ClaimRWO, s.rwo.PV, s.rwo.Handle)
	if s.rwx, err = d.w.CreateVolume(ctx, ClaimRWX, workload.VolumeOptions{Modes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}}); err != nil {
		return s, err
	}
	d.say("claim %s/%s bound to PersistentVolume %s: ReadWriteMany, volume handle %s", ns, ClaimRWX, s.rwx.PV, s.rwx.Handle)
	return s, nil
}

// attach follows the ReadWriteOnce volume of a new pod until the pod runs.
func (d *demo) attach(ctx context.Context, s scene) error {
	d.section("1. A pod with a ReadWriteOnce volume")
	if err := d.w.CreatePod(ctx, d.w.Pod("app-1", s.first, ClaimRWO)); err != nil {
		return err
	}
	d.say("pod app-1 created, scheduled to %s, using claim %s", s.first, ClaimRWO)
	return d.followAttach(ctx, "app-1", s.rwo, s.first)
}

// followAttach tells the steps of attaching v to node for pod.
func (d *demo) followAttach(ctx context.Context, pod string, v workload.Volume, node string) error {
	name := shortName(v.AttachmentName(node))
	steps := []step{
		{fmt.Sprintf("the controller created VolumeAttachment %s (%s on %s)", name, v.PV, node), d.attachmentExists(v, node)},
		{fmt.Sprintf("csi-attacher called ControllerPublishVolume(%s, %s): the driver published it", v.Handle, d.c.NodeID(node)), d.published(v, node)},
		{fmt.Sprintf("csi-attacher set status.attached=true on VolumeAttachment %s", name), d.attachmentAttached(v, node)},
		{fmt.Sprintf("the controller added %s to %s's status.volumesAttached", v.UniqueName(), node), d.nodeAttached(v, node, true)},
		{fmt.Sprintf("kubelet listed it in %s's status.volumesInUse (at its next node status write, every %s)", node, d.statusPeriod()), d.nodeInUse(v, node, true)},
		{fmt.Sprintf("kubelet called NodeStageVolume(%s) with the VolumeAttachment's attachmentMetadata as publish context", v.Handle), d.nodeCalled(csidriver.OpNodeStage, v, node)},
		{fmt.Sprintf("kubelet called NodePublishVolume(%s) into the pod's directory", v.Handle), d.nodeCalled(csidriver.OpNodePublish, v, node)},
		{fmt.Sprintf("kubelet started the pod's containers: pod %s is Running", pod), d.podRunning(pod)},
	}
	for _, st := range steps {
		if err := d.await(ctx, st.what, st.cond); err != nil {
			return err
		}
	}
	return nil
}

// refuse puts a second pod on the ReadWriteOnce claim on another node.
func (d *demo) refuse(ctx context.Context, s scene) error {
	d.section("2. The same ReadWriteOnce claim on another node")
	if err := d.w.CreatePod(ctx, d.w.Pod("app-2", s.second, ClaimRWO)); err != nil {
		return err
	}
	d.say("pod app-2 created, scheduled to %s, using claim %s", s.second, ClaimRWO)
	var message string
	err := d.await(ctx, "the controller refused to attach: event on pod app-2", func(ctx context.Context) (bool, error) {
		var err error
		message, err = d.failedAttachEvent(ctx, "app-2")
		return message != "", err
	})
	if err != nil {
		return err
	}
	d.say("    Warning FailedAttachVolume: %s", message)
	if err := d.kubectl(ctx, "events", "--for", "pod/app-2", "-n", d.opts.Namespace); err != nil {
		return err
	}
	va, err := d.w.Attachment(ctx, s.rwo, s.second)
	if err != nil {
		return err
	}
	if va != nil {
		return fmt.Errorf("demo: VolumeAttachment %s exists for %s on %s while %s holds it", va.Name, s.rwo.PV, s.second, s.first)
	}
	d.say("no VolumeAttachment for %s on %s: the volume stays on %s", s.rwo.PV, s.second, s.first)
	return nil
}

// move deletes the first pod and follows the volume to the second node.
func (d *demo) move(ctx context.Context, s scene) error {
	d.section("3. The first pod goes away, the volume moves")
	if err := d.w.DeletePod(ctx, "app-1"); err != nil {
		return err
	}
	d.say("pod app-1 deleted")
	name := shortName(s.rwo.AttachmentName(s.first))
	finalizer := sim.AttacherFinalizer(d.c.DriverName)
	steps := []step{
		{fmt.Sprintf("kubelet on %s stopped the pod and called NodeUnpublishVolume(%s)", s.first, s.rwo.Handle), d.nodeCalled(csidriver.OpNodeUnpublish, s.rwo, s.first)},
		{fmt.Sprintf("kubelet on %s called NodeUnstageVolume(%s)", s.first, s.rwo.Handle), d.nodeCalled(csidriver.OpNodeUnstage, s.rwo, s.first)},
		{fmt.Sprintf("kubelet took it out of %s's status.volumesInUse", s.first), d.nodeInUse(s.rwo, s.first, false)},
		{fmt.Sprintf("the controller took it out of %s's status.volumesAttached", s.first), d.nodeAttached(s.rwo, s.first, false)},
		{fmt.Sprintf("the controller deleted VolumeAttachment %s; finalizer %s keeps it until the driver has let go", name, finalizer), d.attachmentDeleted(s.rwo, s.first)},
		{fmt.Sprintf("csi-attacher called ControllerUnpublishVolume(%s, %s) and removed its finalizer: %s is gone", s.rwo.Handle, d.c.NodeID(s.first), name), d.attachmentGone(s.rwo, s.first)},
	}
	for _, st := range steps {
		if err := d.await(ctx, st.what, st.cond); err != nil {
			return err
		}
	}
	if err := d.followAttach(ctx, "app-2", s.rwo, s.second); err != nil {
		return err
	}
	if conflicts := d.c.Driver.Conflicts(); len(conflicts) > 0 {
		return fmt.Errorf("demo: the driver refused ControllerPublishVolume on a second node: %+v", conflicts)
	}
	d.say("the driver never had %s published on two nodes at once", s.rwo.Handle)
	return nil
}

// share runs a pod on every node with the ReadWriteMany claim.
func (d *demo) share(ctx context.Context, s scene) error {
	d.section("4. A ReadWriteMany volume on every node at once")
	for i, node := range d.c.Nodes {
		pod := fmt.Sprintf("reader-%d", i+1)
		if err := d.w.CreatePod(ctx, d.w.Pod(pod, node, ClaimRWX)); err != nil {
			return err
		}
		d.say("pod %s created, scheduled to %s, using claim %s", pod, node, ClaimRWX)
	}
	for _, node := range d.c.Nodes {
		if err := d.await(ctx, fmt.Sprintf("%s lists %s in status.volumesAttached", node, s.rwx.PV), d.nodeAttached(s.rwx, node, true)); err != nil {
			return err
		}
	}
	for i := range d.c.Nodes {
		pod := fmt.Sprintf("reader-%d", i+1)
		if err := d.await(ctx, fmt.Sprintf("pod %s is Running", pod), d.podRunning(pod)); err != nil {
			return err
		}
	}
	d.say("the driver has %s published on %s", s.rwx.Handle, strings.Join(d.c.Driver.PublishedNodes(s.rwx.Handle), ", "))
	return nil
}

// detachAll deletes every pod and waits until nothing is attached any more.
func (d *demo) detachAll(ctx context.Context, s scene) error {
	d.section("5. Every pod deleted: everything detaches")
	pods, err := d.c.Client.CoreV1().Pods(d.opts.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing the demo's pods: %w", err)
	}
	for _, pod := range pods.Items {
		if err := d.w.DeletePod(ctx, pod.Name); err != nil {
			return err
		}
	}
	d.say("pods deleted: %s", strings.Join(podNames(pods.Items), ", "))
	steps := []step{
		{"kubelet unpublished and unstaged every volume on every node", func(context.Context) (bool, error) {
			return len(d.c.Driver.StagedNodes(s.rwo.Handle)) == 0 && len(d.c.Driver.StagedNodes(s.rwx.Handle)) == 0, nil
		}},
		{"every VolumeAttachment of the driver is gone", func(ctx context.Context) (bool, error) {
			vas, err := d.w.Attachments(ctx)
			return len(vas) == 0, err
		}},
		{"the driver has nothing published", func(context.Context) (bool, error) { return len(d.c.Driver.Published()) == 0, nil }},
		{"no node lists a volume in status.volumesAttached", d.noNodeAttached},
	}
	for _, st := range steps {
		if err := d.await(ctx, st.what, st.cond); err != nil {
			return err
		}
	}
	return nil
}

// step is one thing the demo waits for, and says once it happened.
type step struct {
	what string
	cond func(context.Context) (bool, error)
}

// statusPeriod is the hollow kubelets' node status period.
func (d *demo) statusPeriod() time.Duration {
	return cmp.Or(d.c.NodeStatusUpdateFrequency, kubeletStatusPeriod)
}

// nodeCalled holds once the node plugin on node has answered op on v successfully.
func (d *demo) nodeCalled(op csidriver.Operation, v workload.Volume, node string) func(context.Context) (bool, error) {
	return func(context.Context) (bool, error) {
		return slices.ContainsFunc(d.c.Driver.CallsFor(op, v.Handle), func(call csidriver.Call) bool {
			return call.NodeID == d.c.NodeID(node) && call.Code == codes.OK
		}), nil
	}
}

func (d *demo) attachmentExists(v workload.Volume, node string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		va, err := d.w.Attachment(ctx, v, node)
		return va != nil, err
	}
}

func (d *demo) attachmentAttached(v workload.Volume, node string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		va, err := d.w.Attachment(ctx, v, node)
		return va != nil && va.Status.Attached, err
	}
}

// attachmentDeleted holds once the VolumeAttachment is being deleted, or gone.
func (d *demo) attachmentDeleted(v workload.Volume, node string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		va, err := d.w.Attachment(ctx, v, node)
		return err == nil && (va == nil || va.DeletionTimestamp != nil), err
	}
}

func (d *demo) attachmentGone(v workload.Volume, node string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		va, err := d.w.Attachment(ctx, v, node)
		return err == nil && va == nil, err
	}
}

// published holds once the driver has v published on node.
func (d *demo) published(v workload.Volume, node string) func(context.Context) (bool, error) {
	return func(context.Context) (bool, error) {
		return slices.Contains(d.c.Driver.PublishedNodes(v.Handle), d.c.NodeID(node)), nil
	}
}

func (d *demo) nodeAttached(v workload.Volume, node string, want bool) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		attached, _, err := d.w.InNodeStatus(ctx, node, v)
		return err == nil && attached == want, err
	}
}

func (d *demo) nodeInUse(v workload.Volume, node string, want bool) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		_, inUse, err := d.w.InNodeStatus(ctx, node, v)
		return err == nil && inUse == want, err
	}
}

func (d *demo) noNodeAttached(ctx context.Context) (bool, error) {
	for _, node := range d.c.Nodes {
		n, err := d.c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("reading node %s: %w", node, err)
		}
		if len(n.Status.VolumesAttached) > 0 {
			return false, nil
		}
	}
	return true, nil
}

func (d *demo) podRunning(name string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		pod, err := d.c.Client.CoreV1().Pods(d.opts.Namespace).Get(ctx, name, metav1.GetOptions{})
		return err == nil && pod.Status.Phase == corev1.PodRunning, err
	}
}

// failedAttachEvent returns the message of a FailedAttachVolume event on the pod, ""
// if there is none yet.
func (d *demo) failedAttachEvent(ctx context.Context, pod string) (string, error) {
	events, err := d.w.PodEvents(ctx, pod)
	for _, e := range events {
		if message, ok := strings.CutPrefix(e, failedAttachEvent); ok {
			return message, nil
		}
	}
	return "", err
}

// kubectl runs kubectl with the cluster's admin kubeconfig and shows the command and
// its output.
func (d *demo) kubectl(ctx context.Context, args ...string) error {
	d.say("$ kubectl %s", strings.Join(args, " "))
	stdout, _, err := kubectl.Kubectl{Binary: d.opts.Kubectl, Kubeconfig: d.c.Kubeconfig}.Run(ctx, "", args...)
	if err != nil {
		return err
	}
	for line := range strings.Lines(stdout) {
		fmt.Fprintf(d.out, "            %s", line)
	}
	return nil
}

// await polls cond until it holds, then says what happened.
func (d *demo) await(ctx context.Context, what string, cond func(context.Context) (bool, error)) error {
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, pollInterval, d.opts.StepTimeout, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		lastErr = err
		return ok && err == nil, nil
	})
	if err != nil {
		if lastErr != nil {
			err = fmt.Errorf("%w (last error: %w)", err, lastErr)
		}
		return fmt.Errorf("demo: waiting for: %s: %w", what, err)
	}
	d.say("%s", what)
	return nil
}

func (d *demo) section(format string, args ...any) {
	fmt.Fprintf(d.out, "\n== "+format+"\n", args...)
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "[%7s] "+format+"\n", append([]any{fmtElapsed(time.Since(d.began))}, args...)...)
}

func fmtElapsed(d time.Duration) string {
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func roundDuration(d time.Duration) time.Duration {
	return d.Round(10 * time.Millisecond)
}

// shortName shortens a VolumeAttachment name (csi- and 64 hex digits) for reading.
func shortName(name string) string {
	if len(name) > 16 {
		return name[:16] + "…"
	}
	return name
}

func podNames(pods []corev1.Pod) []string {
	names := make([]string, 0, len(pods))
	for _, p := range pods {
		names = append(names, p.Name)
	}
	return names
}
