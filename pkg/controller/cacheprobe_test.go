package controller

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/attachments"
)

// TestStartUpProvesAStandbysAttachmentsByTheCacheProbe: a standby's
// VolumeAttachment informer listed before the controller led, and nothing has
// changed since, so its cache reaches the present only at a bookmark. The cache
// probe, created once the controller leads, proves it current without a list of
// every VolumeAttachment, not even of one to read the present, and is deleted
// once the informer shows it, as is a probe left by an earlier leader; where the
// probe cannot be written, the check reads the present as before.
func TestStartUpProvesAStandbysAttachmentsByTheCacheProbe(t *testing.T) {
	va := volumeAttachment("h-1", "node-a", pvSource("pv-1"), true)
	tests := []struct {
		name string
		// leftover: a probe an earlier leader did not delete exists.
		leftover bool
		// refused: the API server refuses the probe's create.
		refused bool
		shadow  bool
		// wantProof is what the check's log line may say proved the cache
		// current. Without the probe, the cache reaching the present races the
		// quorum list the start-up check sends at once: either may win.
		wantProof []string
		// wantCreates is how many creates of the probe were sent.
		wantCreates int
	}{
		{name: "probe written", wantProof: []string{"its cache past the probe"}, wantCreates: 1},
		{name: "a probe left by an earlier leader", leftover: true, wantProof: []string{"its cache past the probe"}, wantCreates: 2},
		{name: "probe refused", refused: true, wantProof: []string{"its cache at the present", "a quorum list"}, wantCreates: 1},
		{name: "shadow mode writes no probe", shadow: true, wantProof: []string{"its cache at the present", "a quorum list"}, wantCreates: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			ctx := klog.NewContext(t.Context(), logger)
			objs := []runtime.Object{va}
			if tc.leftover {
				objs = append(objs, &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: attachments.CacheProbe}})
			}
			client := fake.NewClientset(objs...)
			c := standbyControllerWithoutPass(t, client)
			c.opts.Shadow = tc.shadow
			creates := stampCreatedAttachments(client, tc.refused)
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := c.waitForCurrentInformers(ctx); err != nil {
				t.Fatal(err)
			}
			logged := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
			if !slices.ContainsFunc(tc.wantProof, func(proof string) bool { return strings.Contains(logged, `attachments="`+proof+" after ") }) {
				t.Errorf("the check's log line does not say the VolumeAttachment cache was proven by one of %q; the log:\n%s", tc.wantProof, logged)
			}
			if got := creates.Load(); got != int32(tc.wantCreates) {
				t.Errorf("the probe was created %d times, want %d", got, tc.wantCreates)
			}
			if lists := attachmentLists(client); tc.wantProof[0] == "its cache past the probe" && lists != 0 {
				t.Errorf("VolumeAttachments listed %d times beside the probe, want none", lists)
			}
			// As Run does, the leader deletes the probes its informer shows.
			if !tc.shadow {
				c.writing.Store(&ctx)
			}
			if _, err := c.fillState(ctx); err != nil {
				t.Fatal(err)
			}
			if !eventually(5*time.Second, func() bool {
				_, err := client.StorageV1().VolumeAttachments().Get(ctx, attachments.CacheProbe, metav1.GetOptions{})
				return apierrors.IsNotFound(err)
			}) {
				t.Errorf("the probe is left once the informer showed it")
			}
			// A probe whose create answered late, or a stopped leader's, is
			// deleted when the informer shows it.
			if err := client.Tracker().Add(&storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: attachments.CacheProbe}}); err != nil {
				t.Fatal(err)
			}
			gone := eventually(5*time.Second, func() bool {
				_, err := client.StorageV1().VolumeAttachments().Get(ctx, attachments.CacheProbe, metav1.GetOptions{})
				return apierrors.IsNotFound(err)
			})
			if gone == tc.shadow {
				t.Errorf("a probe made after the check: deleted %v, want %v", gone, !tc.shadow)
			}
		})
	}
}

// stampCreatedAttachments gives each VolumeAttachment created through client a
// resourceVersion above any the fake gave before (its tracker gives objects
// none of their own), or refuses the create, and counts the creates of the
// cache probe.
func stampCreatedAttachments(client *fake.Clientset, refuse bool) *atomic.Int32 {
	var creates atomic.Int32
	next := 1000
	client.PrependReactor("create", "volumeattachments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		va := a.(clienttesting.CreateAction).GetObject().(*storagev1.VolumeAttachment)
		if va.Name == attachments.CacheProbe {
			creates.Add(1)
		}
		if refuse {
			return true, nil, errors.New("admission webhook denied the request")
		}
		next++
		va.ResourceVersion = strconv.Itoa(next)
		return false, nil, nil
	})
	return &creates
}

// attachmentLists counts the lists of VolumeAttachments sent to client after
// the informer's own, of one object or of all.
func attachmentLists(client *fake.Clientset) int {
	n := -1
	for _, a := range client.Actions() {
		if l, ok := a.(clienttesting.ListActionImpl); ok && l.GetResource().Resource == "volumeattachments" {
			n++
		}
	}
	return n
}
