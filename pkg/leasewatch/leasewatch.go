// Package leasewatch lets a standby take the leader election Lease as soon as it
// is free: when its holder releases it, or once it has gone its lease duration
// without a change that this replica saw.
//
// client-go's elector learns of a change only at its next attempt, which comes a
// retry period to 2.2 of them after the last, and counts the lease from then: with
// a 15 s lease and a 2 s retry period a standby takes over between 15 and about 24 s
// after the holder's last renewal, and up to 4.4 s after a release. A Tracker
// watches the Lease, so that it knows each version from a watch event's delay
// after it was written, and the elector's first attempt is held back until the
// Lease is free by that reckoning. The rule is the elector's own, on a better
// clock: a version counts from when this replica first saw it, never from before
// it was written, and the elector takes the Lease with an update conditional on
// the version it has just read.
package leasewatch

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// WatchingLine is logged once the watch of the Lease has listed it: from then on
// this replica takes the Lease as soon as it is free.
const WatchingLine = "Watching the lease"

// Tracker remembers the latest version of the Lease this replica has seen, from
// its watch or from the elector's reads and writes, and when it first saw it.
type Tracker struct {
	identity string
	// onHolder is told each holder other than this replica that a new version
	// names, as client-go's elector tells OnNewLeader.
	onHolder func(holder string)

	mu   sync.Mutex
	seen sighting
	// lastRead is the version the elector's latest read returned.
	lastRead string
	// changed is closed, and replaced, at each new sighting.
	changed chan struct{}
}

// sighting is one version of the Lease, or its absence, and when this replica
// first saw it.
type sighting struct {
	known   bool
	exists  bool
	version string
	// resourceVersion orders versions that arrive out of order.
	resourceVersion string
	holder          string
	duration        time.Duration
	since           time.Time
}

// New returns a Tracker for the replica with this leader election identity.
// onHolder, if not nil, is called with the holder of each version seen whose
// holder is another replica and differs from the last version's.
func New(identity string, onHolder func(holder string)) *Tracker {
	return &Tracker{identity: identity, onHolder: onHolder, changed: make(chan struct{})}
}

// sightingOf is what lease (nil: none exists) tells, seen at now. Versions are
// told apart by resourceVersion, and by the spec too, for a client that does not
// set resourceVersions.
func sightingOf(lease *coordinationv1.Lease, now time.Time) sighting {
	s := sighting{known: true, since: now}
	if lease == nil {
		return s
	}
	rec := resourcelock.LeaseSpecToLeaderElectionRecord(&lease.Spec)
	var renewed string
	if lease.Spec.RenewTime != nil {
		renewed = lease.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
	}
	s.exists = true
	s.version = fmt.Sprintf("%s/%s/%s/%d/%d", lease.ResourceVersion, rec.HolderIdentity, renewed, rec.LeaseDurationSeconds, rec.LeaderTransitions)
	s.resourceVersion = lease.ResourceVersion
	s.holder = rec.HolderIdentity
	s.duration = time.Duration(rec.LeaseDurationSeconds) * time.Second
	return s
}

// observe records a version of the Lease (nil: none exists) seen at now, and
// returns its version.
func (t *Tracker) observe(lease *coordinationv1.Lease, now time.Time) string {
	next := sightingOf(lease, now)
	if newHolder := t.record(next); newHolder && t.onHolder != nil {
		t.onHolder(next.holder)
	}
	return next.version
}

// record makes next the latest sighting unless it is the same version or an
// older one; it reports whether next names another replica as a new holder.
func (t *Tracker) record(next sighting) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seen.known && t.seen.exists == next.exists && t.seen.version == next.version {
		return false
	}
	if next.exists && t.seen.exists && next.resourceVersion != "" && t.seen.resourceVersion != "" {
		// A watch event that arrives after a read of a later version does
		// not bring the earlier one back.
		if c, err := resourceversion.CompareResourceVersion(next.resourceVersion, t.seen.resourceVersion); err == nil && c < 0 {
			return false
		}
	}
	newHolder := next.holder != "" && next.holder != t.identity && next.holder != t.seen.holder
	t.seen = next
	close(t.changed)
	t.changed = make(chan struct{})
	return newHolder
}

// read records what one of the elector's reads returned.
func (t *Tracker) read(lease *coordinationv1.Lease, now time.Time) {
	version := t.observe(lease, now)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lastRead = version
}

// expiredAtLastRead tells whether the version the elector's latest read returned
// is held by another replica and has gone its lease duration since this replica
// first saw it.
func (t *Tracker) expiredAtLastRead(now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.seen
	return s.exists && s.version == t.lastRead && s.holder != "" && s.holder != t.identity && !now.Before(s.since.Add(s.duration))
}

// Leases wraps the client the elector's lock reads and writes the Lease with, so
// that the tracker sees every version that passes through it.
func (t *Tracker) Leases(getter coordinationv1client.LeasesGetter) coordinationv1client.LeasesGetter {
	return leasesGetter{LeasesGetter: getter, tracker: t}
}

type leasesGetter struct {
	coordinationv1client.LeasesGetter
	tracker *Tracker
}

func (g leasesGetter) Leases(namespace string) coordinationv1client.LeaseInterface {
	return leaseClient{LeaseInterface: g.LeasesGetter.Leases(namespace), tracker: g.tracker}
}

type leaseClient struct {
	coordinationv1client.LeaseInterface
	tracker *Tracker
}

func (c leaseClient) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	lease, err := c.LeaseInterface.Get(ctx, name, opts)
	switch {
	case err == nil:
		c.tracker.read(lease, time.Now())
	case apierrors.IsNotFound(err):
		c.tracker.read(nil, time.Now())
	}
	return lease, err
}

func (c leaseClient) Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	created, err := c.LeaseInterface.Create(ctx, lease, opts)
	if err == nil {
		c.tracker.observe(created, time.Now())
	}
	return created, err
}

func (c leaseClient) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	updated, err := c.LeaseInterface.Update(ctx, lease, opts)
	if err == nil {
		c.tracker.observe(updated, time.Now())
	}
	return updated, err
}

// Lock wraps the elector's lock, whose client must come from Leases: a Lease
// held by another replica that the latest read shows unchanged for its lease
// duration since this replica first saw that version is reported without a
// holder, so that the elector takes it at once rather than count the duration
// again from its own, later, first sight. It takes it with an update conditional
// on the version read: if the holder renewed since, the update fails.
func (t *Tracker) Lock(lock resourcelock.Interface) resourcelock.Interface {
	return trackedLock{Interface: lock, tracker: t}
}

type trackedLock struct {
	resourcelock.Interface
	tracker *Tracker
}

func (l trackedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.Interface.Get(ctx)
	if err != nil || !l.tracker.expiredAtLastRead(time.Now()) {
		return rec, raw, err
	}
	free := *rec
	free.HolderIdentity = ""
	if raw, err = json.Marshal(free); err != nil {
		return nil, nil, fmt.Errorf("encoding the expired lease record: %w", err)
	}
	return &free, raw, nil
}

// Watch starts an informer on the Lease that shows the tracker every version,
// until ctx ends. It does not wait for the informer's list: Await bounds the wait
// for a first sight.
func (t *Tracker) Watch(ctx context.Context, client kubernetes.Interface, namespace, name string) error {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	informer := factory.Coordination().V1().Leases().Informer()
	seen := func(obj any) {
		if lease, ok := obj.(*coordinationv1.Lease); ok {
			t.observe(lease, time.Now())
		}
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
		DeleteFunc: func(any) { t.observe(nil, time.Now()) },
	}); err != nil {
		return fmt.Errorf("watching the lease: %w", err)
	}
	factory.Start(ctx.Done())
	context.AfterFunc(ctx, factory.Shutdown)
	go func() {
		if !toolscache.WaitFor(ctx, "", informer.HasSyncedChecker()) {
			return
		}
		if len(informer.GetStore().List()) == 0 {
			t.observe(nil, time.Now())
		}
		klog.FromContext(ctx).Info(WatchingLine, "lease", namespace+"/"+name)
	}()
	return nil
}

// Await returns once the elector's next attempt may take the Lease: there is
// none, it has no holder, it is this replica's, or it has gone its lease
// duration without a change this replica saw. It also returns when ctx ends,
// and after unseen if nothing was seen of the Lease by then (the watch not
// allowed, say): the elector's own attempts then decide alone.
func (t *Tracker) Await(ctx context.Context, unseen time.Duration) {
	logger := klog.FromContext(ctx)
	giveUp := time.NewTimer(unseen)
	defer giveUp.Stop()
	for {
		t.mu.Lock()
		s, changed := t.seen, t.changed
		t.mu.Unlock()
		wake := giveUp.C
		var expires *time.Timer
		if s.known {
			if !s.exists || s.holder == "" || s.holder == t.identity {
				return
			}
			left := time.Until(s.since.Add(s.duration))
			if left <= 0 {
				return
			}
			expires = time.NewTimer(left)
			wake = expires.C
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
			if expires != nil {
				expires.Stop()
			}
		case <-wake:
			if !s.known {
				logger.Info("Nothing seen of the lease yet; the elector's attempts decide alone", "after", unseen)
			}
			return
		}
	}
}
