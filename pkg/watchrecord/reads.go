package watchrecord

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
)

// A new leader must know every VolumeAttachment the previous one made, and every
// node and pod as they are, before it decides. A read that asks for no resourceVersion is a quorum read: the API
// server answers with the present, never with an older copy from its cache. The
// informer's own list is such a read when it asks for no resourceVersion (or
// when it watches with sendInitialEvents from none, the streaming form of a
// list); if it was sent after the controller began to lead, it shows every write
// of the previous leader, and once the informer's cache holds each object it
// returned, at that version or a later one, no second list of every object is
// needed to prove it.

// Version is the identity and version of one object a read returned.
type Version struct {
	UID             types.UID
	ResourceVersion string
}

// Read is what one quorum read of the informer returned: each object's version
// by its key (namespace/name, or name), the lead in whose time its request was
// sent, and how many lapses the informer had had when it was sent (0 for an
// informer whose lapses are not counted).
type Read struct {
	Objects     map[string]Version
	AfterLapses uint64
	lead        uint64
}

// Reads keeps the latest quorum read of an informer that completed.
type Reads struct {
	// lapses, if not nil, counts the informer's lapses.
	lapses *Lapses
	mu     sync.Mutex
	// lead counts the times a controller began to lead (Lead).
	lead uint64
	// listing is the list being read page by page, if it is a quorum read.
	listing *Read
	latest  *Read
}

// Lead records that a controller begins to lead, and returns the number that
// SentSince takes: a read sent from now on shows every write of an earlier
// leader.
func (r *Reads) Lead() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lead++
	return r.lead
}

// Consistent tells whether a list or watch request with opts reads the present.
func Consistent(opts metav1.ListOptions) bool { return opts.ResourceVersion == "" }

// ListSent records that a list request with opts is about to be sent: its first
// page starts a read, if the request is a quorum read; its later pages continue
// it.
func (r *Reads) ListSent(opts metav1.ListOptions) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case opts.Continue != "":
	case Consistent(opts):
		r.listing = r.newRead()
	default:
		r.listing = nil
	}
}

// Listed records a page of the list being read; the last page completes the
// read, and a failed page abandons it.
func (r *Reads) Listed(list runtime.Object, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.listing == nil {
		return
	}
	if err != nil {
		r.listing = nil
		return
	}
	items, itemsErr := meta.ExtractList(list)
	if itemsErr != nil {
		r.listing = nil
		return
	}
	for _, item := range items {
		add(r.listing, item)
	}
	if LastPage(list) {
		r.latest, r.listing = r.listing, nil
	}
}

// initialEvents returns what a watch that sends the initial objects, from no
// resourceVersion, tells of each event: its initial objects make a read, which
// the bookmark that ends them completes. Its later events, and the events of
// any other watch, are not part of a read.
func (r *Reads) initialEvents(opts metav1.ListOptions) func(watch.Event) {
	if opts.SendInitialEvents == nil || !*opts.SendInitialEvents || !Consistent(opts) {
		return func(watch.Event) {}
	}
	r.mu.Lock()
	read := r.newRead()
	r.mu.Unlock()
	return func(ev watch.Event) {
		if read == nil {
			return
		}
		switch ev.Type {
		case watch.Added:
			add(read, ev.Object)
		case watch.Bookmark:
			if m, err := meta.Accessor(ev.Object); err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
				r.mu.Lock()
				r.latest = read
				r.mu.Unlock()
				read = nil
			}
		}
	}
}

// newRead starts a read sent now; r.mu is held.
func (r *Reads) newRead() *Read {
	read := &Read{Objects: map[string]Version{}, lead: r.lead}
	if r.lapses != nil {
		read.AfterLapses, _, _ = r.lapses.State()
	}
	return read
}

func add(read *Read, obj runtime.Object) {
	if m, err := meta.Accessor(obj); err == nil {
		read.Objects[toolscache.MetaObjectToName(m).String()] = Version{UID: m.GetUID(), ResourceVersion: m.GetResourceVersion()}
	}
}

// SentSince returns the latest quorum read that completed, if its request was
// sent after Lead returned lead.
func (r *Reads) SentSince(lead uint64) (Read, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.latest == nil || r.latest.lead < lead {
		return Read{}, false
	}
	return *r.latest, true
}

// Drop forgets the reads recorded so far, once nothing needs them.
func (r *Reads) Drop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.latest = nil
}
