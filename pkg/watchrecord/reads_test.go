package watchrecord

import (
	"errors"
	"maps"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
)

func va(name, rv string) *storagev1.VolumeAttachment {
	return &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: rv}}
}

func page(cont string, vas ...*storagev1.VolumeAttachment) *storagev1.VolumeAttachmentList {
	l := &storagev1.VolumeAttachmentList{ListMeta: metav1.ListMeta{Continue: cont}}
	for _, v := range vas {
		l.Items = append(l.Items, *v)
	}
	return l
}

func endOfInitialEvents() watch.Event {
	return watch.Event{Type: watch.Bookmark, Object: &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{
		ResourceVersion: "9", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"},
	}}}
}

// TestReads: only a read of the present that completed, sent at or after the
// given time, proves what the informer must hold.
func TestReads(t *testing.T) {
	both := map[string]Version{"a": {UID: "uid-a", ResourceVersion: "5"}, "b": {UID: "uid-b", ResourceVersion: "6"}}
	list := func(rv string, pages ...func(r *Reads)) func(r *Reads) {
		return func(r *Reads) {
			r.ListSent(metav1.ListOptions{ResourceVersion: rv})
			for _, p := range pages {
				p(r)
			}
		}
	}
	listed := func(cont string, err error, vas ...*storagev1.VolumeAttachment) func(r *Reads) {
		return func(r *Reads) {
			if cont != "" {
				defer r.ListSent(metav1.ListOptions{Continue: cont})
			}
			r.Listed(page(cont, vas...), err)
		}
	}
	watched := func(opts metav1.ListOptions, events ...watch.Event) func(r *Reads) {
		return func(r *Reads) {
			each := r.initialEvents(opts)
			for _, ev := range events {
				each(ev)
			}
		}
	}
	initial := metav1.ListOptions{SendInitialEvents: ptr.To(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}
	tests := []struct {
		name string
		// led: a controller began to lead before the steps, or after them.
		led   bool
		steps []func(r *Reads)
		want  map[string]Version
	}{
		{name: "a list of the present", steps: []func(*Reads){list("", listed("", nil, va("a", "5"), va("b", "6")))}, led: true, want: both},
		{name: "in two pages", steps: []func(*Reads){list("", listed("next", nil, va("a", "5")), listed("", nil, va("b", "6")))}, led: true, want: both},
		{name: "sent before the controller led", steps: []func(*Reads){list("", listed("", nil, va("a", "5")))}},
		{name: "a list from a resourceVersion", steps: []func(*Reads){list("4", listed("", nil, va("a", "5")))}, led: true},
		{name: "a page failed", steps: []func(*Reads){list("", listed("next", nil, va("a", "5")), listed("", errors.New("boom")))}, led: true},
		{name: "not the last page yet", steps: []func(*Reads){list("", listed("next", nil, va("a", "5")))}, led: true},
		{name: "the initial events of a watch", led: true, want: both, steps: []func(*Reads){watched(initial,
			watch.Event{Type: watch.Added, Object: va("a", "5")}, watch.Event{Type: watch.Added, Object: va("b", "6")}, endOfInitialEvents(),
			watch.Event{Type: watch.Added, Object: va("c", "10")})}},
		{name: "a watch that ended before its initial events did", led: true, steps: []func(*Reads){watched(initial,
			watch.Event{Type: watch.Added, Object: va("a", "5")})}},
		{name: "a watch from a resourceVersion", led: true, steps: []func(*Reads){watched(metav1.ListOptions{ResourceVersion: "4", SendInitialEvents: ptr.To(true)},
			watch.Event{Type: watch.Added, Object: va("a", "5")}, endOfInitialEvents())}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reads{}
			lead := r.Lead()
			for _, step := range tc.steps {
				step(r)
			}
			if !tc.led {
				lead = r.Lead()
			}
			read, ok := r.SentSince(lead)
			if ok != (tc.want != nil) || !maps.Equal(read.Objects, tc.want) {
				t.Errorf("SentSince = %v, %v; want %v", read.Objects, ok, tc.want)
			}
			r.Drop()
			if _, ok := r.SentSince(lead); ok {
				t.Error("a read is left after Drop")
			}
		})
	}
}

// TestReadsKeyObjectsAsTheInformersCacheDoes: a namespaced object is recorded
// under namespace/name, the key the informer's cache holds it by.
func TestReadsKeyObjectsAsTheInformersCacheDoes(t *testing.T) {
	r := &Reads{}
	lead := r.Lead()
	r.ListSent(metav1.ListOptions{})
	r.Listed(&v1.PodList{Items: []v1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-p", ResourceVersion: "3"}}}}, nil)
	read, ok := r.SentSince(lead)
	if !ok {
		t.Fatal("no read recorded")
	}
	want := map[string]Version{"ns/p": {UID: "uid-p", ResourceVersion: "3"}}
	if !maps.Equal(read.Objects, want) {
		t.Errorf("read = %v, want %v", read.Objects, want)
	}
}

// TestReadsTellAfterWhichLapseTheyWereSent: a read proves that every object is
// known only for the lapses before it was sent.
func TestReadsTellAfterWhichLapseTheyWereSent(t *testing.T) {
	lapses := NewLapses()
	r := &Reads{lapses: lapses}
	lead := r.Lead()
	read := func() Read {
		t.Helper()
		r.ListSent(metav1.ListOptions{})
		r.Listed(page("", va("a", "5")), nil)
		got, ok := r.SentSince(lead)
		if !ok {
			t.Fatal("no read recorded")
		}
		return got
	}
	if got := read(); got.AfterLapses != 0 {
		t.Errorf("a read before any lapse tells %d lapses, want 0", got.AfterLapses)
	}
	lapses.Listed(nil, errors.New("etcdserver: request timed out"))
	if got := read(); got.AfterLapses != 1 {
		t.Errorf("a read after the first lapse tells %d lapses, want 1", got.AfterLapses)
	}
}
