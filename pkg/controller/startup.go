package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/attachments"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/populator"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/watchrecord"
)

// startupCheck is a start-up check under way: each informer's check runs on its
// own until it passes, so that what rests only on the informers already proven
// need not wait for the others.
type startupCheck struct {
	started time.Time
	checks  []*informerCheck
}

// startCheck starts the check of each informer that makes sure that the
// informers hold every fact the first decision can rest on, at least as a quorum read from etcd sees it once
// the controller leads: every VolumeAttachment that exists, the record of a CSI
// attachment, as that very object (its UID) at a version no older than the one
// read; every node at a version no older than the one read, since node status
// is the only record of an iSCSI or Fibre Channel attachment (and of the
// volumes kubelet uses); and every pod at a version no older than the one read,
// since the wait for unmount before a force detach counts from the moment no
// pod on the node needs the volume. After a fail-over, the previous leader's
// last writes must be known first, or a single-attach volume could be attached
// twice, or taken out of the status of a node that has it mounted; and a pod
// the informer has not shown yet would start that wait while the pod still
// needs the volume. An object of the same name is not enough: the previous
// leader may have deleted a VolumeAttachment and created it again, and an
// informer that holds the old one shows its deletion before the new one, a
// moment in which the volume looks free.
//
// The quorum read is the informer's own list if it was one sent since the
// controller leads (see package watchrecord) and the informer holds each object
// it returned, as that very object at that version or a later one. Otherwise,
// as for a standby whose informers listed before it led, a quorum read of one
// object gives the present's resourceVersion, or, for VolumeAttachments, which
// change least, the cache probe's create does (see cacheprobe.go): an informer
// whose cache has applied the changes up to it, in the order the API server
// made them, holds the present or a later state (cacheAtPresent). Only if it
// does not does the controller list every object; after a probe, only once the
// cache has had proofListAfter to get there.
//
// The three checks run side by side (Run fills the state once the pod and node
// informers passed, beside the VolumeAttachment informer's), and one that
// passed is not run again: an informer never goes back to an older state, so
// what a quorum read proved after the controller began to lead stays proven.
// Once every pod is known, the claims of pods on nodes that the informers
// cannot follow to a PersistentVolume are read from etcd (waitForClaimsOfPods).
func (c *Controller) startCheck(ctx context.Context) *startupCheck {
	inf := c.informers
	c.attachmentsProven = provenLapses{}
	s := &startupCheck{started: time.Now(), checks: []*informerCheck{
		{kind: "VolumeAttachment", listed: "VolumeAttachments", key: "attachments", behind: c.attachmentsBehind,
			reads: inf.attachmentReads, lead: c.leads.attachments, held: inf.attachments.Informer().GetIndexer(),
			presentVersion: c.presentVersion(attachmentsResource),
			probe:          c.attachmentsPresent(),
			lapses:         c.attachmentWatches,
			proven:         &c.attachmentsProven},
		{kind: "Node", listed: "nodes", key: "nodes", behind: c.nodesBehind,
			reads: inf.nodeReads, lead: c.leads.nodes, held: inf.nodes.Informer().GetIndexer(),
			presentVersion: c.presentVersion(nodesResource)},
		{kind: "Pod", listed: "pods", key: "pods", behind: c.podsBehind,
			reads: inf.podReads, lead: c.leads.pods, held: inf.pods.Informer().GetIndexer(),
			presentVersion: c.presentVersion(podsResource)},
	}}
	for _, check := range s.checks {
		check.done = make(chan struct{})
		go func() {
			defer close(check.done)
			_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
				return check.try(ctx, c, s.started), nil
			})
		}()
	}
	return s
}

// wait returns once the checks of the informers with the given keys (of all,
// with none) have passed, or with an error once ctx ends.
func (s *startupCheck) wait(ctx context.Context, keys ...string) error {
	for _, check := range s.checks {
		if len(keys) > 0 && !slices.Contains(keys, check.key) {
			continue
		}
		select {
		case <-check.done:
		case <-ctx.Done():
		}
		if check.passed == "" {
			return fmt.Errorf("the %s informer was not proven current: %w", check.kind, ctx.Err())
		}
	}
	return nil
}

// report ends a check that passed: the records of the informers' own quorum
// reads are no longer needed, and the log says how each informer was proven
// current.
func (s *startupCheck) report(ctx context.Context) {
	current := []any{"duration", time.Since(s.started)}
	for _, check := range s.checks {
		check.reads.Drop()
		current = append(current, check.key, check.passed)
	}
	klog.FromContext(ctx).Info("Informers hold the present", current...)
}

// try proves the informer current once, and reports whether it did.
func (check *informerCheck) try(ctx context.Context, c *Controller, started time.Time) bool {
	logger := klog.FromContext(ctx)
	if read, ok := check.ownReadHeld(); ok {
		logger.V(2).Info("The "+check.kind+" informer's own list was a quorum read sent since this controller leads: no second list", check.listed, len(read.Objects))
		check.provenAfter(read.AfterLapses, true)
		check.pass("its own list", started)
		return true
	}
	lapses, resumed := check.lapsesNow()
	present, listAfter := check.presentVersion, time.Duration(0)
	if check.probe != nil {
		check.probe.probed.Store(false)
		present, listAfter = check.probe.read, proofListAfter
	}
	at, behind, err := cacheAtPresentOrList(ctx, c, present, check.held, check.behind, listAfter)
	switch {
	case at && check.probe != nil && check.probe.probed.Load():
		logger.V(2).Info("The " + check.kind + " informer has applied every change up to the cache probe")
		check.pass("its cache past the probe", started)
	case at:
		logger.V(2).Info("The " + check.kind + " informer has applied every change up to a quorum read sent since this controller leads")
		check.pass("its cache at the present", started)
	case err != nil:
		logger.Error(err, "Listing "+check.listed+" to check the informer is current; retrying")
		return false
	case behind > 0:
		logger.Info(check.kind+" informer is behind the API server; waiting", check.key+"Behind", behind)
		return false
	default:
		check.pass("a quorum list", started)
	}
	check.provenAfter(lapses, resumed)
	return true
}

// waitForClaimsOfPods makes sure that where the informers cannot follow a claim
// of a pod on a node to the PersistentVolume bound to it, a quorum read cannot
// either: the claim informer holds the claim, and the PersistentVolume informer
// the PersistentVolume the claim is bound to, at least as etcd has them. A pod
// needs its volume through its claim and that PersistentVolume, so an informer
// that lists a past without them (its list is served from the API server's
// cache) would start the wait for unmount of a volume the pod still needs. Only
// those claims are read: usually none, as a pod is scheduled once its claims are
// bound.
func (c *Controller) waitForClaimsOfPods(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	return wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		behind, err := c.claimsBehind(ctx)
		switch {
		case err != nil:
			logger.Error(err, "Reading the claims of pods that the informers cannot resolve; retrying")
			return false, nil
		case behind > 0:
			logger.Info("Claim or PersistentVolume informer is behind the API server; waiting", "claimsBehind", behind)
			return false, nil
		}
		return true, nil
	})
}

// claimsBehind counts the claims of pods on nodes that the informers cannot
// follow to a PersistentVolume, and for which the claim informer, or the
// PersistentVolume informer, lacks what a quorum read returns or holds an older
// version of it.
func (c *Controller) claimsBehind(ctx context.Context) (int, error) {
	pods, err := c.informers.pods.Lister().List(labels.Everything())
	if err != nil {
		return 0, fmt.Errorf("listing pods from the informer: %w", err)
	}
	read := make(map[types.NamespacedName]bool)
	behind := 0
	for _, pod := range pods {
		if !populator.NeedsVolumes(pod) {
			continue
		}
		for _, key := range c.populator.UnresolvedClaims(pod) {
			if read[key] {
				continue
			}
			read[key] = true
			b, err := c.claimBehind(ctx, key)
			if err != nil {
				return 0, err
			}
			if b {
				behind++
			}
		}
	}
	return behind, nil
}

// claimBehind reads the claim, and the PersistentVolume it is bound to, from etcd
// and tells whether the informers lack either or hold an older version.
func (c *Controller) claimBehind(ctx context.Context, key types.NamespacedName) (bool, error) {
	claims, err := c.client.CoreV1().PersistentVolumeClaims(key.Namespace).List(ctx, byName(key.Name))
	if err != nil {
		return false, fmt.Errorf("reading claim %s: %w", key, err)
	}
	i := slices.IndexFunc(claims.Items, func(pvc v1.PersistentVolumeClaim) bool { return pvc.Name == key.Name })
	if i < 0 {
		return false, nil
	}
	claim := &claims.Items[i]
	if held, err := c.informers.claims.Lister().PersistentVolumeClaims(key.Namespace).Get(key.Name); !holds(held, err, claim) {
		return true, nil
	}
	if claim.Spec.VolumeName == "" {
		return false, nil
	}
	pvs, err := c.client.CoreV1().PersistentVolumes().List(ctx, byName(claim.Spec.VolumeName))
	if err != nil {
		return false, fmt.Errorf("reading PersistentVolume %s of claim %s: %w", claim.Spec.VolumeName, key, err)
	}
	j := slices.IndexFunc(pvs.Items, func(pv v1.PersistentVolume) bool { return pv.Name == claim.Spec.VolumeName })
	if j < 0 {
		return false, nil
	}
	pv := &pvs.Items[j]
	held, err := c.informers.pvs.Lister().Get(pv.Name)
	return !holds(held, err, pv), nil
}

// informerLeads is what each informer's record of quorum reads returned when the
// controller was made.
type informerLeads struct {
	attachments, nodes, pods uint64
}

// presentWaitPeriod bounds the wait for an informer to apply the changes up to
// the present's resourceVersion; a quorum list usually answers sooner.
const presentWaitPeriod = 5 * time.Second

// informerCheck is one informer's start-up check: reads is the record of the
// informer's own quorum reads and held its cache; presentVersion reads the
// resourceVersion of the present, which the cache may reach while a quorum list
// is on its way; behind counts what the informer lacks against a quorum list of
// its own.
//
// For the VolumeAttachment informer, lapses is the record of its lapses, and
// proven is told after which lapse the read that passed the check was sent: it
// is also the proof that every VolumeAttachment is known (see relist.go) once
// the state is rebuilt from the cache, if the informer has not lapsed since.
type informerCheck struct {
	// kind names the informer's objects in log messages, listed in the plural,
	// key as a log key.
	kind, listed, key string
	// passed tells how the check passed, and when; done is closed once it
	// passed, or ctx ended.
	passed         string
	done           chan struct{}
	reads          *watchrecord.Reads
	lead           uint64
	held           toolscache.Indexer
	presentVersion func(context.Context) (string, error)
	// probe, if not nil, reads the present by writing an object of the
	// resource, a present the cache reaches without a bookmark.
	probe  *presentReader
	behind func(context.Context) (int, error)
	lapses *watchrecord.Lapses
	proven *provenLapses
}

// provenLapses tells that a quorum read sent after the informer's lapses-th lapse,
// once it had resumed, showed nothing the cache lacks.
type provenLapses struct {
	lapses uint64
	ok     bool
}

// lapsesNow returns the informer's lapses so far and whether it resumed since the
// last; with no record of lapses, none.
func (check *informerCheck) lapsesNow() (uint64, bool) {
	if check.lapses == nil {
		return 0, false
	}
	lapses, resumed, _ := check.lapses.State()
	return lapses, resumed
}

// pass records how the check passed, and how long after started.
func (check *informerCheck) pass(how string, started time.Time) {
	check.passed = how + " after " + time.Since(started).Round(time.Millisecond).String()
}

// provenAfter records that the read that passed the check was sent after the
// informer's lapses-th lapse, and after it resumed if resumed.
func (check *informerCheck) provenAfter(lapses uint64, resumed bool) {
	if check.proven != nil && resumed {
		*check.proven = provenLapses{lapses: lapses, ok: true}
	}
}

// cacheAtPresentOrList proves an informer current by whichever comes first: its
// cache reaching the present (cacheAtPresent), or list, a quorum list of every
// object, answering. The list is sent listAfter after the start, or once the
// wait for the cache gave up if sooner, unless the cache got there by then, and
// called off when the cache gets there first (atPresent, and no result of
// list); a list that fails waits for the cache.
// The cache of a resource that often changes gets there in milliseconds, long
// before a list of 10,000 objects; one of a resource that did not change since
// only at the next bookmark, which may be a minute away.
func cacheAtPresentOrList[T any](ctx context.Context, c *Controller, presentVersion func(context.Context) (string, error), cache toolscache.Store, list func(context.Context) (T, error), listAfter time.Duration) (atPresent bool, listed T, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		listed T
		err    error
	}
	answered := make(chan answer, 1)
	gaveUp := make(chan struct{})
	go func() {
		if listAfter > 0 {
			t := time.NewTimer(listAfter)
			defer t.Stop()
			select {
			case <-t.C:
			case <-gaveUp:
			case <-ctx.Done():
				answered <- answer{err: ctx.Err()}
				return
			}
		}
		listed, err := list(ctx)
		answered <- answer{listed, err}
	}()
	reached := make(chan bool, 1)
	go func() {
		at, err := c.cacheAtPresent(ctx, presentVersion, cache)
		if err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).V(2).Info("Could not read the present; the quorum list decides", "err", err)
		}
		if !at {
			close(gaveUp)
		}
		reached <- at
	}()
	for {
		select {
		case at := <-reached:
			if at {
				return true, listed, nil
			}
			reached = nil
		case a := <-answered:
			if a.err != nil && reached != nil && <-reached {
				return true, listed, nil
			}
			return false, a.listed, a.err
		}
	}
}

// cacheAtPresent reads the present's resourceVersion with presentVersion and
// waits up to c.presentWait for the informer's cache to have applied every
// change up to it (client-go keeps the version of the last change or bookmark
// its cache applied). A cache there holds the state of that moment or a later
// one: the API server sends the changes of a resource in the order it made
// them. It reports false if the cache did not get there in time, which is the
// case when nothing changed since nor a bookmark came.
func (c *Controller) cacheAtPresent(ctx context.Context, presentVersion func(context.Context) (string, error), cache toolscache.Store) (bool, error) {
	present, err := presentVersion(ctx)
	if err != nil {
		return false, fmt.Errorf("reading the present resourceVersion: %w", err)
	}
	if present == "" {
		return false, nil
	}
	deadline := time.Now().Add(c.presentWait)
	for !watchrecord.AtLeastVersion(cache.LastStoreSyncResourceVersion(), present) {
		if !time.Now().Before(deadline) {
			return false, nil
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return false, ctx.Err()
		}
	}
	return true, nil
}

// presentVersion reads the resourceVersion of the present with a quorum list of
// one object of the resource, by its metadata.
func (c *Controller) presentVersion(resource schema.GroupVersionResource) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		list, err := c.metadata.Resource(resource).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return "", err
		}
		return list.ResourceVersion, nil
	}
}

// ownReadHeld tells whether the informer's own latest quorum read was sent since
// the controller leads and the informer holds each object it returned, as that
// very object (its UID) at that version or a later one; n is how many there were.
func (check *informerCheck) ownReadHeld() (read watchrecord.Read, ok bool) {
	read, ok = check.reads.SentSince(check.lead)
	if !ok {
		return read, false
	}
	for key, v := range read.Objects {
		obj, exists, err := check.held.GetByKey(key)
		if err != nil || !exists {
			return read, false
		}
		m, err := meta.Accessor(obj)
		if err != nil || m.GetUID() != v.UID || !watchrecord.AtLeastVersion(m.GetResourceVersion(), v.ResourceVersion) {
			return read, false
		}
	}
	return read, true
}

// attachmentsBehind counts the VolumeAttachments that the informer does not
// hold, or holds as another object of the same name, or at a version older than
// the one a quorum list returns; the cache probe, the record of no attachment,
// does not count. An object the informer still holds after its deletion only
// makes the controller more careful until the informer shows the deletion.
func (c *Controller) attachmentsBehind(ctx context.Context) (int, error) {
	behind := 0
	err := quorumList(ctx, c.metadataPage(attachmentsResource, ""), func(listed *metav1.PartialObjectMetadata) {
		if listed.Name == attachments.CacheProbe {
			return
		}
		if held, err := c.informers.attachments.Lister().Get(listed.Name); !holds(held, err, listed) {
			behind++
		}
	})
	return behind, err
}

// The resources whose objects the start-up check lists by metadata.
var (
	attachmentsResource = storagev1.SchemeGroupVersion.WithResource("volumeattachments")
	nodesResource       = v1.SchemeGroupVersion.WithResource("nodes")
	podsResource        = v1.SchemeGroupVersion.WithResource("pods")
)

// metadataPage lists one page of a resource's objects in namespace ("" for
// all), by their metadata only.
func (c *Controller) metadataPage(resource schema.GroupVersionResource, namespace string) func(context.Context, metav1.ListOptions) ([]metav1.PartialObjectMetadata, string, error) {
	return func(ctx context.Context, opts metav1.ListOptions) ([]metav1.PartialObjectMetadata, string, error) {
		list, err := c.metadata.Resource(resource).Namespace(namespace).List(ctx, opts)
		if err != nil {
			return nil, "", err
		}
		return list.Items, list.Continue, nil
	}
}

// listAttachments returns the name and UID of every VolumeAttachment, read from
// etcd.
func (c *Controller) listAttachments(ctx context.Context) (map[string]types.UID, error) {
	out := make(map[string]types.UID)
	err := quorumList(ctx, c.metadataPage(attachmentsResource, ""), func(va *metav1.PartialObjectMetadata) {
		out[va.Name] = va.UID
	})
	if err != nil {
		return nil, fmt.Errorf("listing VolumeAttachments: %w", err)
	}
	return out, nil
}

// nodesBehind counts the nodes that the informer does not hold, or holds at a
// version older than the one listed. A node the informer still holds after its
// deletion only makes the controller more careful until the informer shows the
// deletion.
func (c *Controller) nodesBehind(ctx context.Context) (int, error) {
	behind := 0
	err := quorumList(ctx, c.metadataPage(nodesResource, ""), func(listed *metav1.PartialObjectMetadata) {
		held, err := c.informers.nodes.Lister().Get(listed.Name)
		if err != nil || !watchrecord.AtLeastVersion(held.ResourceVersion, listed.ResourceVersion) {
			behind++
		}
	})
	return behind, err
}

// podsBehind counts the pods that the informer does not hold, or holds at a
// version older than the one listed. Pods come and go all the time: a listed pod
// that the informer does not hold is read again, and one the API server no longer
// has was deleted after the list, not missed.
func (c *Controller) podsBehind(ctx context.Context) (int, error) {
	behind := 0
	var absent []types.NamespacedName
	err := quorumList(ctx, c.metadataPage(podsResource, ""), func(listed *metav1.PartialObjectMetadata) {
		held, err := c.informers.pods.Lister().Pods(listed.Namespace).Get(listed.Name)
		switch {
		case err != nil:
			absent = append(absent, types.NamespacedName{Namespace: listed.Namespace, Name: listed.Name})
		case !watchrecord.AtLeastVersion(held.ResourceVersion, listed.ResourceVersion):
			behind++
		}
	})
	if err != nil || behind > 0 {
		return behind, err
	}
	for _, key := range absent {
		exists, err := c.podExists(ctx, key)
		if err != nil {
			return 0, fmt.Errorf("reading pod %s that the informer does not hold: %w", key, err)
		}
		if exists {
			behind++
		}
	}
	return behind, nil
}

// podExists tells whether the API server holds the pod now.
func (c *Controller) podExists(ctx context.Context, key types.NamespacedName) (bool, error) {
	pods, _, err := c.metadataPage(podsResource, key.Namespace)(ctx, byName(key.Name))
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(pods, func(p metav1.PartialObjectMetadata) bool { return p.Name == key.Name }), nil
}

// byName lists the one object of that name, as a quorum read. A pod, claim or
// PersistentVolume is listed by name instead of read with a get: the
// controller's role lets it list and watch them, as kube-controller-manager's
// does, and nothing more.
func byName(name string) metav1.ListOptions {
	return metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
}

// metadataPageSize is the number of objects in each page of the start-up
// check's lists, which carry metadata only: a page of 10,000 holds a few
// megabytes. Each page waits its turn at the API server and, on etcd before
// 3.5.13, reads etcd: with 50,000 VolumeAttachments on one kube-apiserver the
// list took 0.47-0.56 s in pages of 10,000 against 0.81-0.86 s in pages of
// 2,000 (watchrecord.QuorumPageSize, the informers' pages of whole objects),
// and 0.72-1.54 s unpaged.
const metadataPageSize = 10000

// quorumList lists every object of a resource, in pages of metadataPageSize that
// all belong to the first one's quorum read, and hands each to each.
func quorumList[T any](ctx context.Context, list func(context.Context, metav1.ListOptions) ([]T, string, error), each func(*T)) error {
	opts := metav1.ListOptions{Limit: metadataPageSize}
	for {
		items, next, err := list(ctx, opts)
		if err != nil {
			return err
		}
		for i := range items {
			each(&items[i])
		}
		if next == "" {
			return nil
		}
		opts.Continue = next
	}
}

// holds tells whether an informer's cache, which returned held and err for the
// name of listed, holds that very object (its UID) at its version or a later one.
func holds(held metav1.Object, err error, listed metav1.Object) bool {
	return err == nil && held.GetUID() == listed.GetUID() && watchrecord.AtLeastVersion(held.GetResourceVersion(), listed.GetResourceVersion())
}
