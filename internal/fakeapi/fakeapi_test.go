package fakeapi

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	toolscache "k8s.io/client-go/tools/cache"
)

func attachment(name string, finalizers ...string) *storagev1.VolumeAttachment {
	return &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: finalizers}}
}

func TestDeleteWaitsForFinalizers(t *testing.T) {
	var writes []string
	s := NewStore(func(_ Reader, w Write) { writes = append(writes, w.Verb) })
	api := s.NewClient(ClientOptions{Name: "test"}).Interface().StorageV1().VolumeAttachments()
	ctx := context.Background()
	if _, err := api.Create(ctx, attachment("va", "f"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := api.Delete(ctx, "va", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	va, err := api.Get(ctx, "va", metav1.GetOptions{})
	if err != nil || va.DeletionTimestamp == nil {
		t.Fatalf("after delete with a finalizer: %v, %v; want the object with a deletionTimestamp", va, err)
	}
	ref := Ref{Resource: VolumeAttachments, Name: "va"}
	if err := s.Mutate("attacher", ref, func(obj runtime.Object) bool {
		obj.(*storagev1.VolumeAttachment).Finalizers = nil
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Get(ctx, "va", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after the last finalizer went: %v, want NotFound", err)
	}
	if want := []string{"create", "delete", "update"}; !slices.Equal(writes, want) {
		t.Errorf("writes observed = %v, want %v", writes, want)
	}
}

func TestPreconditions(t *testing.T) {
	s := NewStore(nil)
	api := s.NewClient(ClientOptions{Name: "test"}).Interface()
	ctx := context.Background()
	created, err := api.StorageV1().VolumeAttachments().Create(ctx, attachment("va"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node, err := api.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	otherUID := types.UID("other")
	tests := []struct {
		name string
		do   func() error
	}{
		{"update from a stale resourceVersion", func() error {
			stale := node.DeepCopy()
			stale.ResourceVersion = "1"
			_, err := api.CoreV1().Nodes().Update(ctx, stale, metav1.UpdateOptions{})
			return err
		}},
		{"patch naming a stale resourceVersion", func() error {
			_, err := api.CoreV1().Nodes().Patch(ctx, "n", types.MergePatchType, []byte(`{"metadata":{"resourceVersion":"1"}}`), metav1.PatchOptions{})
			return err
		}},
		{"delete with another UID", func() error {
			return api.StorageV1().VolumeAttachments().Delete(ctx, created.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &otherUID}})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(); !apierrors.IsConflict(err) {
				t.Errorf("got %v, want a conflict", err)
			}
		})
	}
}

func TestStatusPatchChangesOnlyStatus(t *testing.T) {
	s := NewStore(nil)
	nodes := s.NewClient(ClientOptions{Name: "test"}).Interface().CoreV1().Nodes()
	ctx := context.Background()
	if _, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.NodeSpec{PodCIDR: "10.0.0.0/24"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch := `{"spec":{"podCIDR":"changed"},"status":{"volumesAttached":[{"name":"v","devicePath":""}]}}`
	got, err := nodes.Patch(ctx, "n", types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.PodCIDR != "10.0.0.0/24" || len(got.Status.VolumesAttached) != 1 {
		t.Errorf("after a status patch: spec %+v, status %+v; want the spec unchanged and the status patched", got.Spec, got.Status)
	}
}

// faultsFunc serves one fault for every request and delivers events as told.
type faultsFunc struct {
	fault    Fault
	delivery func(WatchEvent) Delivery
}

func (f faultsFunc) Request(Request) Fault { return f.fault }
func (f faultsFunc) Delivery(ev WatchEvent) Delivery {
	if f.delivery == nil {
		return Delivery{}
	}
	return f.delivery(ev)
}

func TestFaults(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name        string
		fault       Fault
		wantErr     bool
		wantApplied bool
		wantCrash   bool
	}{
		{"none", Fault{}, false, true, false},
		{"error before apply", Fault{Err: boom}, true, false, false},
		{"error after apply", Fault{ErrAfter: boom}, true, true, false},
		{"delayed", Fault{Delay: time.Second, Latency: time.Second}, false, true, false},
		{"crash at apply", Fault{Crash: true}, true, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := NewStore(nil)
				crashed := false
				c := s.NewClient(ClientOptions{Name: "test", Faults: faultsFunc{fault: tc.fault}, OnCrash: func() { crashed = true }})
				start := time.Now()
				_, err := c.Interface().StorageV1().VolumeAttachments().Create(context.Background(), attachment("va"), metav1.CreateOptions{})
				if (err != nil) != tc.wantErr {
					t.Errorf("error = %v, want one: %v", err, tc.wantErr)
				}
				if took, want := time.Since(start), tc.fault.Delay+tc.fault.Latency; took != want {
					t.Errorf("took %s, want %s", took, want)
				}
				var applied bool
				s.Read(func(r Reader) { _, applied = Get[*storagev1.VolumeAttachment](r, "", "va") })
				if applied != tc.wantApplied || crashed != tc.wantCrash {
					t.Errorf("applied %v, crashed %v; want %v, %v", applied, crashed, tc.wantApplied, tc.wantCrash)
				}
				if _, err := s.Create("other", attachment("second")); err != nil {
					t.Fatal(err)
				}
				_, err = c.Interface().StorageV1().VolumeAttachments().Update(context.Background(), attachment("second"), metav1.UpdateOptions{})
				if fenced := errors.Is(err, errFenced); fenced != tc.wantCrash {
					t.Errorf("write after the request: %v; want it refused: %v", err, tc.wantCrash)
				}
			})
		})
	}
}

// TestInformerAcrossWatchEnds runs an informer through watches that end cleanly
// and with 410 Gone: it relists or resumes and ends up with the store's state.
func TestInformerAcrossWatchEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewStore(nil)
		ends := 0
		c := s.NewClient(ClientOptions{Name: "test", Faults: faultsFunc{delivery: func(ev WatchEvent) Delivery {
			switch ev.ResourceVersion % 4 {
			case 1:
				ends++
				return Delivery{End: Expire}
			case 2:
				return Delivery{End: Resume, Delay: time.Second}
			}
			return Delivery{}
		}}})
		ctx, cancel := context.WithCancel(context.Background())
		factory := informers.NewSharedInformerFactory(c.Interface(), 0)
		informer := factory.Storage().V1().VolumeAttachments().Informer()
		factory.Start(ctx.Done())
		if !toolscache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
			t.Fatal("informer did not sync")
		}
		for i := range 20 {
			name := string(rune('a' + i))
			if _, err := s.Create("test", attachment(name, "f")); err != nil {
				t.Fatal(err)
			}
			if i%3 == 0 {
				if err := s.Delete("test", Ref{Resource: VolumeAttachments, Name: name}); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		var want int
		s.Read(func(r Reader) { want = len(r.List(VolumeAttachments)) })
		if got := len(informer.GetStore().List()); got != want || ends == 0 {
			t.Errorf("informer holds %d objects after %d expired watches, want %d", got, ends, want)
		}
		cancel()
		factory.Shutdown()
	})
}
