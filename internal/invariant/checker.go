package invariant

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/internal/safetyrules"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
)

// syncTimeout bounds how long Violations waits for the watches to catch up.
const syncTimeout = 30 * time.Second

// Checker watches VolumeAttachments, Nodes and PersistentVolumes and records
// violations of the attach/detach safety rules.
type Checker struct {
	// ctx ends the watches.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	client kubernetes.Interface
	// streams by kind, in the order they are listed at start.
	streams []*stream

	mu          sync.Mutex
	attachments map[string]attachment
	// byVolume indexes attachments by volume key: name -> node.
	byVolume map[string]map[string]string
	// overlaps are the nodes each single-attach candidate volume last had
	// VolumeAttachments on, when more than one.
	overlaps   map[string][]string
	nodes      map[string]*history[nodeVersion]
	pvs        map[string]*history[pvVersion]
	pending    []check
	violations []string
	events     int
}

// kind is one of the watched resources.
type kind int

const (
	nodeKind kind = iota
	pvKind
	attachmentKind
)

func (k kind) String() string {
	return [...]string{"nodes", "persistentvolumes", "volumeattachments"}[k]
}

// stream is the list+watch of one resource.
type stream struct {
	kind  kind
	list  func(ctx context.Context) ([]runtime.Object, string, error)
	watch func(ctx context.Context, rv string) (watch.Interface, error)
	// progress is the resourceVersion up to which every event has been processed.
	progress uint64
	// objects are the resourceVersions of the objects that exist as of progress.
	objects map[string]uint64
}

// check is a rule to judge at resourceVersion rv, once the streams it depends on
// have reached it.
type check struct {
	rv    uint64
	needs []kind
	judge func() (violations []string)
}

// Start lists the three resources and watches them from there on, until Stop or ctx
// is cancelled. Everything that happens after Start returns is checked.
func Start(ctx context.Context, cfg *rest.Config) (*Checker, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "invariant-checker"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating invariant checker client: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	c := &Checker{
		ctx:         ctx,
		cancel:      cancel,
		client:      client,
		attachments: map[string]attachment{},
		byVolume:    map[string]map[string]string{},
		overlaps:    map[string][]string{},
		nodes:       map[string]*history[nodeVersion]{},
		pvs:         map[string]*history[pvVersion]{},
	}
	c.streams = []*stream{
		newStream[*corev1.NodeList](nodeKind, client.CoreV1().Nodes()),
		newStream[*corev1.PersistentVolumeList](pvKind, client.CoreV1().PersistentVolumes()),
		newStream[*storagev1.VolumeAttachmentList](attachmentKind, client.StorageV1().VolumeAttachments()),
	}
	// VolumeAttachments are listed last, so the state of nodes and volumes is known
	// from before the first VolumeAttachment change on.
	for _, s := range c.streams {
		if err := c.listInitial(ctx, s); err != nil {
			cancel()
			return nil, err
		}
	}
	for _, s := range c.streams {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.run(ctx, s, strconv.FormatUint(s.progress, 10))
		}()
	}
	return c, nil
}

// listWatcher is the List and Watch of a typed client, for one resource.
type listWatcher[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

func newStream[L runtime.Object](k kind, api listWatcher[L]) *stream {
	return &stream{
		kind: k,
		list: func(ctx context.Context) ([]runtime.Object, string, error) {
			l, err := api.List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, "", err
			}
			objs, err := meta.ExtractList(l)
			if err != nil {
				return nil, "", fmt.Errorf("reading the %s list: %w", k, err)
			}
			listMeta, err := meta.ListAccessor(l)
			if err != nil {
				return nil, "", fmt.Errorf("reading the %s list: %w", k, err)
			}
			return objs, listMeta.GetResourceVersion(), nil
		},
		watch: func(ctx context.Context, rv string) (watch.Interface, error) {
			return api.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		},
	}
}

func (c *Checker) listInitial(ctx context.Context, s *stream) error {
	objs, listRV, err := s.list(ctx)
	if err != nil {
		return fmt.Errorf("listing %s: %w", s.kind, err)
	}
	rv, err := parseRV(listRV)
	if err != nil {
		return fmt.Errorf("listing %s: %w", s.kind, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s.objects = map[string]uint64{}
	for _, obj := range objs {
		if err := c.apply(s, watch.Added, obj, true); err != nil {
			return err
		}
	}
	s.progress = rv
	return nil
}

// run watches one resource from resourceVersion rv, resuming after a dropped
// connection from the last event seen, until ctx ends.
func (c *Checker) run(ctx context.Context, s *stream, rv string) {
	logger := klog.FromContext(ctx).WithValues("resource", s.kind.String())
	for ctx.Err() == nil {
		w, err := s.watch(ctx, rv)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				c.record(fmt.Sprintf("invariant checker: watch on %s could not resume from resourceVersion %s (%v); events were missed", s.kind, rv, err))
				return
			}
			logger.V(2).Info("Watch failed, retrying", "err", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		var lost error
		rv, lost = c.consume(s, w, rv)
		w.Stop()
		if lost != nil {
			c.record(fmt.Sprintf("invariant checker: watch on %s failed at resourceVersion %s (%v); events were missed", s.kind, rv, lost))
			return
		}
	}
}

// consume processes a watch's events until it ends, and returns the resourceVersion
// to resume from; an error means the watch cannot resume without missing events.
func (c *Checker) consume(s *stream, w watch.Interface, rv string) (string, error) {
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Error:
			err := apierrors.FromObject(ev.Object)
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return rv, err
			}
			return rv, nil
		case watch.Bookmark:
			m, err := meta.Accessor(ev.Object)
			if err != nil {
				return rv, fmt.Errorf("reading bookmark: %w", err)
			}
			if n, err := parseRV(m.GetResourceVersion()); err == nil {
				c.mu.Lock()
				s.progress = max(s.progress, n)
				c.evaluate()
				c.mu.Unlock()
			}
			rv = m.GetResourceVersion()
		default:
			c.mu.Lock()
			err := c.apply(s, ev.Type, ev.Object, false)
			c.mu.Unlock()
			if err != nil {
				return rv, err
			}
			m, _ := meta.Accessor(ev.Object)
			rv = m.GetResourceVersion()
		}
	}
	return rv, nil
}

func parseRV(rv string) (uint64, error) {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("resourceVersion %q is not an etcd revision: %w", rv, err)
	}
	return n, nil
}

// apply processes one event (or, with initial, one listed object) in order. c.mu is held.
func (c *Checker) apply(s *stream, typ watch.EventType, obj runtime.Object, initial bool) error {
	m, err := meta.Accessor(obj)
	if err != nil {
		return fmt.Errorf("reading %s event: %w", s.kind, err)
	}
	rv, err := parseRV(m.GetResourceVersion())
	if err != nil {
		return err
	}
	name := m.GetName()
	exists := typ != watch.Deleted
	if exists {
		s.objects[name] = rv
	} else {
		delete(s.objects, name)
	}
	switch s.kind {
	case nodeKind:
		h := c.nodes[name]
		if h == nil {
			h = &history[nodeVersion]{rvOf: func(v nodeVersion) uint64 { return v.rv }}
			c.nodes[name] = h
		}
		h.add(nodeVersionOf(rv, obj.(*corev1.Node), exists))
	case pvKind:
		h := c.pvs[name]
		if h == nil {
			h = &history[pvVersion]{rvOf: func(v pvVersion) uint64 { return v.rv }}
			c.pvs[name] = h
		}
		pv := obj.(*corev1.PersistentVolume)
		h.add(pvVersion{rv: rv, exists: exists, volume: csiVolume(pv)})
	case attachmentKind:
		c.applyAttachment(name, rv, obj.(*storagev1.VolumeAttachment), exists, initial)
	}
	if !initial {
		s.progress = max(s.progress, rv)
		c.events++
		c.evaluate()
	}
	return nil
}

// applyAttachment records a VolumeAttachment change and schedules the checks it calls
// for. c.mu is held.
func (c *Checker) applyAttachment(name string, rv uint64, va *storagev1.VolumeAttachment, exists, initial bool) {
	prev, existed := c.attachments[name]
	cur := attachmentOf(va)
	if existed {
		delete(c.byVolume[prev.volume.key()], name)
	}
	if exists {
		c.attachments[name] = cur
		key := cur.volume.key()
		if c.byVolume[key] == nil {
			c.byVolume[key] = map[string]string{}
		}
		c.byVolume[key][name] = cur.node
	} else {
		delete(c.attachments, name)
	}
	// A deletion already requested when the checker started cannot be judged.
	deletionRequested := !initial && existed && !prev.deleting && (!exists || cur.deleting)
	if deletionRequested {
		c.scheduleDeletionCheck(name, rv, prev)
	}
	c.scheduleOverlapCheck(cur.volume, rv)
	if existed && prev.volume.key() != cur.volume.key() {
		c.scheduleOverlapCheck(prev.volume, rv)
	}
}

// scheduleOverlapCheck looks at the nodes a volume has VolumeAttachments on, and when
// there are several (and there were not the same several before), schedules the check
// that the volume may be attached to several nodes.
func (c *Checker) scheduleOverlapCheck(ref volumeRef, rv uint64) {
	key := ref.key()
	attachmentsOf := map[string][]string{}
	for name, node := range c.byVolume[key] {
		attachmentsOf[node] = append(attachmentsOf[node], name)
	}
	nodes := slices.Sorted(maps.Keys(attachmentsOf))
	if len(nodes) < 2 {
		delete(c.overlaps, key)
		if len(c.byVolume[key]) == 0 {
			delete(c.byVolume, key)
		}
		return
	}
	if slices.Equal(nodes, c.overlaps[key]) {
		return
	}
	c.overlaps[key] = nodes
	c.pending = append(c.pending, check{rv: rv, needs: []kind{pvKind}, judge: func() []string {
		vol, known := c.volumeAt(ref, rv)
		if !known {
			return nil
		}
		v := safetyrules.Volume{Ref: describe(ref), Name: vol.Name, SingleAttach: vol.SingleAttach}
		var attachments []safetyrules.Attachment
		for node, names := range attachmentsOf {
			for _, name := range names {
				attachments = append(attachments, safetyrules.Attachment{Name: name, Node: node, Volume: v})
			}
		}
		return worded(safetyrules.SingleAttached(attachments, atRV(rv))...)
	}})
}

// scheduleDeletionCheck schedules the check that a VolumeAttachment's deletion,
// requested at rv, did not pull a volume from under a running mount. The checker
// sees no pods: a node not Ready may lose any volume.
func (c *Checker) scheduleDeletionCheck(name string, rv uint64, a attachment) {
	c.pending = append(c.pending, check{rv: rv, needs: []kind{nodeKind, pvKind}, judge: func() []string {
		vol, known := c.volumeAt(a.volume, rv)
		if !known || vol.Name == "" {
			return nil
		}
		h := c.nodes[a.node]
		if h == nil {
			return nil
		}
		node, ok := h.at(rv)
		if !ok {
			return nil
		}
		snap := safetyrules.Snapshot{
			Nodes: map[string]*safetyrules.NodeHealth{a.node: {
				Deleted: !node.exists, Unhealthy: !node.exists || !node.ready, OutOfService: node.outOfService,
			}},
			Mounted: func(_, volume string) bool {
				return h.mayHaveMounted(rv, func(v nodeVersion) bool { return v.inUse[volume] }, func(v nodeVersion) bool { return v.attached[volume] })
			},
		}
		v, broken := snap.Detached(safetyrules.Detach{Node: a.node, Volume: vol.Name, Attachment: name, When: atRV(rv)})
		if !broken {
			return nil
		}
		return worded(v)
	}})
}

func atRV(rv uint64) string { return fmt.Sprintf("at resourceVersion %d", rv) }

func worded(vs ...safetyrules.Violation) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.String()
	}
	return out
}

func describe(vol volumeRef) string {
	if vol.inline != nil {
		return "inline " + vol.inline.Name
	}
	return "PV " + vol.pv
}

// volumeAt returns what is known of a volume at rv: for a PersistentVolume, its
// newest version that existed by then. c.mu is held.
func (c *Checker) volumeAt(vol volumeRef, rv uint64) (sim.Volume, bool) {
	if vol.inline != nil {
		return *vol.inline, true
	}
	h := c.pvs[vol.pv]
	if h == nil {
		return sim.Volume{}, false
	}
	v, ok := h.lastExisting(rv, func(v pvVersion) bool { return v.exists })
	return v.volume, ok
}

// evaluate judges the pending checks whose streams have caught up. c.mu is held.
func (c *Checker) evaluate() {
	kept := c.pending[:0]
	for _, chk := range c.pending {
		ready := true
		for _, k := range chk.needs {
			ready = ready && c.streams[k].progress >= chk.rv
		}
		if !ready {
			kept = append(kept, chk)
			continue
		}
		c.violations = append(c.violations, chk.judge()...)
	}
	c.pending = kept
	if c.events%1000 == 0 {
		c.prune()
	}
}

// prune forgets node versions no check can ask for any more: checks come at or after
// the VolumeAttachment stream's progress, or are pending. c.mu is held.
func (c *Checker) prune() {
	floor := c.streams[attachmentKind].progress
	for _, chk := range c.pending {
		floor = min(floor, chk.rv)
	}
	for _, h := range c.nodes {
		h.prune(floor)
	}
}

func (c *Checker) record(violation string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.violations = append(c.violations, violation)
}

// Sync waits until the checker has processed every change made before the call. It
// fails at once if the checker's watches have ended.
func (c *Checker) Sync(ctx context.Context) error {
	if err := c.ctx.Err(); err != nil {
		return fmt.Errorf("the watches have ended: %w", err)
	}
	var errs []error
	for _, s := range c.streams {
		errs = append(errs, c.syncStream(ctx, s))
	}
	c.mu.Lock()
	c.evaluate()
	c.mu.Unlock()
	return errors.Join(errs...)
}

// syncStream waits until a stream has caught up with a fresh consistent list: either
// its events reached the list's resourceVersion, or the objects it knows are exactly
// the listed ones, which means no event is on its way from before the list.
func (c *Checker) syncStream(ctx context.Context, s *stream) error {
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		objs, listRV, err := s.list(ctx)
		if err != nil {
			return false, nil
		}
		rv, err := parseRV(listRV)
		if err != nil {
			return false, err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if s.progress >= rv {
			return true, nil
		}
		if len(objs) != len(s.objects) {
			return false, nil
		}
		for _, obj := range objs {
			m, err := meta.Accessor(obj)
			if err != nil {
				return false, err
			}
			if objRV, err := parseRV(m.GetResourceVersion()); err != nil || s.objects[m.GetName()] != objRV {
				return false, nil
			}
		}
		s.progress = rv
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the %s watch to catch up: %w", s.kind, err)
	}
	return nil
}

// Violations catches up with the API server (while the watches run) and returns every
// violation recorded so far.
func (c *Checker) Violations() []string {
	if c.ctx.Err() == nil {
		c.syncOrRecord()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.violations)
}

// Stop catches up with every change made before the call (unless the context given to
// Start has ended already), ends the watches and judges what is left with what the
// checker has seen. Violations still returns the result afterwards.
func (c *Checker) Stop() {
	if c.ctx.Err() == nil {
		c.syncOrRecord()
	}
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, chk := range c.pending {
		c.violations = append(c.violations, chk.judge()...)
	}
	c.pending = nil
}

func (c *Checker) syncOrRecord() {
	ctx, cancel := context.WithTimeout(context.Background(), syncTimeout)
	defer cancel()
	if err := c.Sync(ctx); err != nil {
		c.record("invariant checker: " + err.Error())
	}
}
