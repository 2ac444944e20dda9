package eventsink

import (
	"runtime"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2/ktesting"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/cache"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/podevents"
)

// TestMemoryOfWaitingNormalEvents measures what the normal events waiting to be
// written hold, at 10,000 of them: one SuccessfulAttachVolume per pod of a
// 10,000-volume burst, none written yet.
func TestMemoryOfWaitingNormalEvents(t *testing.T) {
	const pods = 10000
	rec := New(ktesting.NewLogger(t, ktesting.NewConfig()), fake.NewClientset().CoreV1(), scheme.Scheme, Options{Source: source})
	emitter := podevents.NewEmitter(rec)
	before := heapInUse()
	for i := range pods {
		emitter.Emit([]cache.PodRef{pod(i)}, v1.EventTypeNormal, podevents.ReasonSuccessfulAttach, podevents.AttachSucceeded(
			"pvc-0a1b2c3d-4e5f-6789-abcd-"+pod(i).Name))
	}
	held := heapInUse() - before
	runtime.KeepAlive(rec)
	if n := len(rec.normals); n != pods {
		t.Fatalf("%d normal events waiting, want %d", n, pods)
	}
	perEvent := held / pods
	t.Logf("%d normal events waiting hold %.1f MiB, %d bytes each", pods, float64(held)/(1<<20), perEvent)
	if perEvent > 1024 {
		t.Errorf("%d bytes per waiting event, want at most 1 KiB", perEvent)
	}
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}
