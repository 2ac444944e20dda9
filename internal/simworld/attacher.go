package simworld

import (
	"slices"
	"strings"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/attachdetach-controller/attachdetach-controller/internal/fakeapi"
)

// attacherFinalizer is the finalizer the external-attacher puts on the
// VolumeAttachments of Driver: every character but letters, digits and '-'
// turned into '-'.
var attacherFinalizer = "external-attacher/" + strings.Map(func(r rune) rune {
	if r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
		return r
	}
	return '-'
}, Driver)

// attacher is the CSI external-attacher's state: when each pending attach or
// detach completes, by VolumeAttachment UID.
type attacher struct {
	attachAt, detachAt map[types.UID]time.Time
	// failAttach and failDetach are the odds that an attempt fails.
	failAttach, failDetach float64
	// maxDelay bounds how long an attempt takes.
	maxDelay time.Duration
}

func newAttacher() attacher {
	return attacher{attachAt: map[types.UID]time.Time{}, detachAt: map[types.UID]time.Time{}}
}

// attacherLoop is one pass of the external-attacher over the VolumeAttachments of
// its driver: it puts its finalizer on new ones, attaches (or reports an attach
// error and retries) after a delay, and on deletion detaches (or reports a detach
// error and retries) and takes its finalizer off so that the object goes.
func (w *World) attacherLoop() {
	var vas []*storagev1.VolumeAttachment
	w.store.Read(func(r fakeapi.Reader) {
		for _, va := range fakeapi.List[*storagev1.VolumeAttachment](r) {
			if va.Spec.Attacher == Driver {
				vas = append(vas, va.DeepCopy())
			}
		}
	})
	a := &w.attacher
	now := time.Now()
	for _, va := range vas {
		ref := fakeapi.Ref{Resource: fakeapi.VolumeAttachments, Name: va.Name}
		switch {
		case va.DeletionTimestamp == nil && !slices.Contains(va.Finalizers, attacherFinalizer):
			w.attacherWrite(ref, va.UID, func(va *storagev1.VolumeAttachment) { va.Finalizers = append(va.Finalizers, attacherFinalizer) })
			a.attachAt[va.UID] = now.Add(w.delay())
		case va.DeletionTimestamp == nil && !va.Status.Attached:
			at, ok := a.attachAt[va.UID]
			if !ok {
				a.attachAt[va.UID] = now.Add(w.delay())
			} else if !now.Before(at) {
				w.attachOnce(ref, va)
			}
		case va.DeletionTimestamp != nil && slices.Contains(va.Finalizers, attacherFinalizer):
			at, ok := a.detachAt[va.UID]
			if !ok {
				a.detachAt[va.UID] = now.Add(w.delay())
			} else if !now.Before(at) {
				w.detachOnce(ref, va)
			}
		}
	}
	w.After(w.jitter(200*time.Millisecond, 700*time.Millisecond), w.attacherLoop)
}

// delay is how long one attach or detach attempt takes: mostly quick, sometimes
// longer than the controller's operation timeout.
func (w *World) delay() time.Duration {
	if w.rng.IntN(10) == 0 {
		return w.jitter(0, w.attacher.maxDelay+time.Millisecond)
	}
	return w.jitter(100*time.Millisecond, 3*time.Second)
}

func (w *World) attachOnce(ref fakeapi.Ref, va *storagev1.VolumeAttachment) {
	a := &w.attacher
	if w.rng.Float64() < a.failAttach {
		w.attacherWrite(ref, va.UID, func(va *storagev1.VolumeAttachment) {
			va.Status.AttachError = &storagev1.VolumeError{Time: metav1.Now(), Message: "rpc error: code = Unavailable desc = simulated ControllerPublishVolume failure"}
		})
		a.attachAt[va.UID] = time.Now().Add(w.delay())
		w.logf("attacher: attach of %s to %s failed", ref.Name, va.Spec.NodeName)
		return
	}
	w.attacherWrite(ref, va.UID, func(va *storagev1.VolumeAttachment) {
		va.Status.Attached = true
		va.Status.AttachError = nil
		va.Status.AttachmentMetadata = map[string]string{"devicePath": "/dev/sim"}
	})
	delete(a.attachAt, va.UID)
	w.logf("attacher: %s attached to %s", ref.Name, va.Spec.NodeName)
}

func (w *World) detachOnce(ref fakeapi.Ref, va *storagev1.VolumeAttachment) {
	a := &w.attacher
	if w.rng.Float64() < a.failDetach {
		w.attacherWrite(ref, va.UID, func(va *storagev1.VolumeAttachment) {
			va.Status.DetachError = &storagev1.VolumeError{Time: metav1.Now(), Message: "rpc error: code = Unavailable desc = simulated ControllerUnpublishVolume failure"}
		})
		a.detachAt[va.UID] = time.Now().Add(w.delay())
		w.logf("attacher: detach of %s from %s failed", ref.Name, va.Spec.NodeName)
		return
	}
	w.attacherWrite(ref, va.UID, func(va *storagev1.VolumeAttachment) {
		va.Status.Attached = false
		va.Status.DetachError = nil
		va.Finalizers = slices.DeleteFunc(va.Finalizers, func(f string) bool { return f == attacherFinalizer })
	})
	delete(a.detachAt, va.UID)
	delete(a.attachAt, va.UID)
	w.logf("attacher: %s detached from %s", ref.Name, va.Spec.NodeName)
}

// attacherWrite changes a VolumeAttachment if it is still the one read.
func (w *World) attacherWrite(ref fakeapi.Ref, uid types.UID, f func(*storagev1.VolumeAttachment)) {
	_ = w.store.Mutate("external-attacher", ref, func(obj runtime.Object) bool {
		va := obj.(*storagev1.VolumeAttachment)
		if va.UID != uid {
			return false
		}
		f(va)
		return true
	})
}
