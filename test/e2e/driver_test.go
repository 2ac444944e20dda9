package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/attachdetach-controller/attachdetach-controller/internal/csidriver"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

// TestPublishFailureIsReportedAndRetried: a driver that fails ControllerPublishVolume
// shows as a FailedAttachVolume event on the pod, the attach is retried with backoff,
// and it succeeds once the fault is cleared.
func TestPublishFailureIsReportedAndRetried(t *testing.T) {
	c := newCluster(t, clusterOptions{})
	node := c.Nodes[0]
	v := c.CreateVolume("flaky", workload.VolumeOptions{})
	c.Must(c.local.Driver.SetFault(csidriver.OpPublish, v.Handle, csidriver.Fault{Code: codes.Internal, Message: "disk is busy"}))
	c.CreatePod("app", node, v.Claim)

	want := `Warning FailedAttachVolume AttachVolume.Attach failed for volume "` + v.PV + `" : rpc error: code = Internal desc = disk is busy`
	c.WaitEvent("app", want)

	const failures = 5
	c.Eventually("failed ControllerPublishVolume calls", func() bool {
		return len(c.publishes(v, node, codes.Internal)) >= failures
	})
	// csi-attacher retries the VolumeAttachment with exponential backoff from 100ms
	// (the first two calls may come close together: csi-attacher's own finalizer
	// patch requeues it once).
	iv := intervals(c.publishes(v, node, codes.Internal))
	t.Logf("intervals between failed ControllerPublishVolume calls: %v", iv)
	if slices.ContainsFunc(iv[1:], func(d time.Duration) bool { return d < 50*time.Millisecond }) || iv[len(iv)-1] < 2*iv[1] {
		t.Errorf("retries do not back off: intervals %v", iv)
	}
	va := c.Attachment(v, node)
	if va == nil {
		t.Fatalf("no VolumeAttachment while csi-attacher retries it")
	}
	if c.InNodeStatus(node, v) {
		t.Fatalf("volume in node status while the driver fails")
	}

	c.local.Driver.ClearFault(csidriver.OpPublish, v.Handle)
	c.WaitAttached(v, node)
	c.WaitPodRunning("app")
	c.WaitEvent("app", `Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume "`+v.PV+`" `)
	if n := len(c.publishes(v, node, codes.OK)); n != 1 {
		t.Errorf("successful ControllerPublishVolume calls = %d, want 1", n)
	}
	if now := c.Attachment(v, node); now == nil || now.UID != va.UID {
		t.Errorf("the VolumeAttachment was replaced while csi-attacher retried it")
	}
}

// TestSlowDriverStillAttaches: ControllerPublishVolume and ControllerUnpublishVolume
// taking seconds each still attach and detach, without any failure on the pod.
func TestSlowDriverStillAttaches(t *testing.T) {
	const delay = 2 * time.Second
	c := newCluster(t, clusterOptions{})
	node := c.Nodes[0]
	v := c.CreateVolume("slow", workload.VolumeOptions{})
	c.local.Driver.SetDelay(delay)

	began := time.Now()
	c.CreatePod("app", node, v.Claim)
	c.WaitAttached(v, node)
	if took := time.Since(began); took < delay {
		t.Errorf("attached after %s, before the driver's delay of %s", took, delay)
	}
	c.WaitPodRunning("app")
	if n := len(c.publishes(v, node, codes.OK)); n != 1 {
		t.Errorf("successful ControllerPublishVolume calls = %d, want 1", n)
	}

	c.DeletePod("app")
	c.WaitDetached(v, node)
	if n := len(c.unpublishes(v, node, codes.OK)); n != 1 {
		t.Errorf("successful ControllerUnpublishVolume calls = %d, want 1", n)
	}
	for _, e := range c.PodEvents("app") {
		if strings.Contains(e, "FailedAttachVolume") {
			t.Errorf("unexpected event on a pod whose driver is only slow: %s", e)
		}
	}
}

func intervals(calls []csidriver.Call) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(calls); i++ {
		out = append(out, calls[i].Time.Sub(calls[i-1].Time).Round(time.Millisecond))
	}
	return out
}
