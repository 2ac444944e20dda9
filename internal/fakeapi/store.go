package fakeapi

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// The resources the store serves.
const (
	Pods              = "pods"
	Nodes             = "nodes"
	PVs               = "persistentvolumes"
	PVCs              = "persistentvolumeclaims"
	CSIDrivers        = "csidrivers"
	CSINodes          = "csinodes"
	VolumeAttachments = "volumeattachments"
)

type kind struct {
	group      string
	newObject  func() runtime.Object
	newList    func() runtime.Object
	namespaced bool
}

var kinds = map[string]kind{
	Pods:              {"", func() runtime.Object { return &corev1.Pod{} }, func() runtime.Object { return &corev1.PodList{} }, true},
	Nodes:             {"", func() runtime.Object { return &corev1.Node{} }, func() runtime.Object { return &corev1.NodeList{} }, false},
	PVs:               {"", func() runtime.Object { return &corev1.PersistentVolume{} }, func() runtime.Object { return &corev1.PersistentVolumeList{} }, false},
	PVCs:              {"", func() runtime.Object { return &corev1.PersistentVolumeClaim{} }, func() runtime.Object { return &corev1.PersistentVolumeClaimList{} }, true},
	CSIDrivers:        {"storage.k8s.io", func() runtime.Object { return &storagev1.CSIDriver{} }, func() runtime.Object { return &storagev1.CSIDriverList{} }, false},
	CSINodes:          {"storage.k8s.io", func() runtime.Object { return &storagev1.CSINode{} }, func() runtime.Object { return &storagev1.CSINodeList{} }, false},
	VolumeAttachments: {"storage.k8s.io", func() runtime.Object { return &storagev1.VolumeAttachment{} }, func() runtime.Object { return &storagev1.VolumeAttachmentList{} }, false},
}

// ResourceOf returns the resource an object (or a typed nil pointer) belongs to, or
// "" if the store does not serve it.
func ResourceOf(obj runtime.Object) string {
	switch obj.(type) {
	case *corev1.Pod:
		return Pods
	case *corev1.Node:
		return Nodes
	case *corev1.PersistentVolume:
		return PVs
	case *corev1.PersistentVolumeClaim:
		return PVCs
	case *storagev1.CSIDriver:
		return CSIDrivers
	case *storagev1.CSINode:
		return CSINodes
	case *storagev1.VolumeAttachment:
		return VolumeAttachments
	}
	return ""
}

// Ref names one object.
type Ref struct {
	Resource, Namespace, Name string
}

func (r Ref) String() string {
	if r.Namespace == "" {
		return r.Resource + "/" + r.Name
	}
	return r.Resource + "/" + r.Namespace + "/" + r.Name
}

func refOf(resource string, obj runtime.Object) Ref {
	m, err := meta.Accessor(obj)
	if err != nil {
		panic(fmt.Sprintf("fakeapi: %T has no object metadata", obj))
	}
	return Ref{Resource: resource, Namespace: m.GetNamespace(), Name: m.GetName()}
}

// Write is one write the store applied.
type Write struct {
	// Actor is who sent it: a Client's name, or what the caller of a Store method
	// said.
	Actor string
	// Verb is create, update, patch or delete.
	Verb string
	Ref  Ref
	// Old is the object before (nil when created), New after (nil when removed).
	Old, New runtime.Object
}

// Reader reads the store's objects. The objects it returns must not be modified.
type Reader interface {
	// Get returns the object, or nil.
	Get(resource, namespace, name string) runtime.Object
	// List returns the objects of a resource in every namespace, sorted by
	// namespace and name.
	List(resource string) []runtime.Object
}

// Get returns the object of type T named, if it exists.
func Get[T runtime.Object](r Reader, namespace, name string) (T, bool) {
	var zero T
	obj, ok := r.Get(ResourceOf(zero), namespace, name).(T)
	return obj, ok
}

// List returns every object of type T.
func List[T runtime.Object](r Reader) []T {
	var zero T
	objs := r.List(ResourceOf(zero))
	out := make([]T, len(objs))
	for i, o := range objs {
		out[i] = o.(T)
	}
	return out
}

// Observer is told of every write the store applies, while the store is locked:
// r reads the state right after the write. It must not call the store.
type Observer func(r Reader, w Write)

// Store holds the objects. Its methods are safe for concurrent use.
type Store struct {
	mu       sync.Mutex
	rv       uint64
	uids     uint64
	objects  map[Ref]runtime.Object
	log      []event
	watchers map[*watcher]struct{}
	observer Observer
}

// event is one change, as watches deliver it.
type event struct {
	typ  watch.EventType
	ref  Ref
	obj  runtime.Object
	rv   uint64
	time time.Time
}

// NewStore returns an empty store reporting its writes to observer (may be nil).
func NewStore(observer Observer) *Store {
	return &Store{objects: map[Ref]runtime.Object{}, watchers: map[*watcher]struct{}{}, observer: observer}
}

// reader reads the store while its lock is held.
type reader struct{ s *Store }

func (r reader) Get(resource, namespace, name string) runtime.Object {
	return r.s.objects[Ref{resource, namespace, name}]
}

func (r reader) List(resource string) []runtime.Object {
	var refs []Ref
	for ref := range r.s.objects {
		if ref.Resource == resource {
			refs = append(refs, ref)
		}
	}
	slices.SortFunc(refs, func(a, b Ref) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	out := make([]runtime.Object, len(refs))
	for i, ref := range refs {
		out[i] = r.s.objects[ref]
	}
	return out
}

// Read calls f with the store locked: nothing changes while f runs, so what f
// decides from the objects is decided at one instant.
func (s *Store) Read(f func(Reader)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(reader{s})
}

// Create stores a new object.
func (s *Store) Create(actor string, obj runtime.Object) (runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.create(actor, obj)
}

// Mutate changes an object as f says, with no precondition: the simulated
// components other than the controller read and write atomically. f gets a copy;
// returning false writes nothing.
func (s *Store) Mutate(actor string, ref Ref, f func(obj runtime.Object) bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.objects[ref]
	if !ok {
		return notFound(ref)
	}
	obj := cur.DeepCopyObject()
	if !f(obj) {
		return nil
	}
	_, err := s.replace(actor, "update", ref, obj)
	return err
}

// Delete deletes an object: with finalizers it only gets its deletionTimestamp. A
// pod is removed at once (graceful deletion is the caller's Mutate setting its
// deletionTimestamp).
func (s *Store) Delete(actor string, ref Ref) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.delete(actor, ref, nil)
}

func notFound(ref Ref) error {
	return apierrors.NewNotFound(schema.GroupResource{Group: kinds[ref.Resource].group, Resource: ref.Resource}, ref.Name)
}

func conflict(ref Ref, msg string) error {
	return apierrors.NewConflict(schema.GroupResource{Group: kinds[ref.Resource].group, Resource: ref.Resource}, ref.Name, fmt.Errorf("%s", msg))
}

func (s *Store) create(actor string, obj runtime.Object) (runtime.Object, error) {
	resource := ResourceOf(obj)
	if resource == "" {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("fakeapi does not serve %T", obj))
	}
	ref := refOf(resource, obj)
	if ref.Name == "" {
		return nil, apierrors.NewBadRequest("name is required")
	}
	if _, ok := s.objects[ref]; ok {
		return nil, apierrors.NewAlreadyExists(schema.GroupResource{Group: kinds[resource].group, Resource: resource}, ref.Name)
	}
	obj = obj.DeepCopyObject()
	m, _ := meta.Accessor(obj)
	s.uids++
	m.SetUID(types.UID(fmt.Sprintf("uid-%d", s.uids)))
	m.SetCreationTimestamp(metav1.NewTime(time.Now()))
	m.SetDeletionTimestamp(nil)
	s.commit(actor, "create", ref, nil, obj)
	return obj.DeepCopyObject(), nil
}

// replace stores obj in place of the current object, keeping what clients cannot
// change, and removes it when it is being deleted and has no finalizer left.
func (s *Store) replace(actor, verb string, ref Ref, obj runtime.Object) (runtime.Object, error) {
	cur, ok := s.objects[ref]
	if !ok {
		return nil, notFound(ref)
	}
	curMeta, _ := meta.Accessor(cur)
	m, _ := meta.Accessor(obj)
	m.SetUID(curMeta.GetUID())
	m.SetCreationTimestamp(curMeta.GetCreationTimestamp())
	if curMeta.GetDeletionTimestamp() != nil {
		m.SetDeletionTimestamp(curMeta.GetDeletionTimestamp())
	}
	m.SetResourceVersion(curMeta.GetResourceVersion())
	// A pod being deleted stays until deleted again (kubelet does it once its
	// containers stopped); anything else goes with its last finalizer.
	if ref.Resource != Pods && m.GetDeletionTimestamp() != nil && len(m.GetFinalizers()) == 0 {
		s.remove(actor, verb, ref, cur, obj)
		return obj.DeepCopyObject(), nil
	}
	if equality.Semantic.DeepEqual(cur, obj) {
		return obj, nil
	}
	s.commit(actor, verb, ref, cur, obj)
	return obj.DeepCopyObject(), nil
}

func (s *Store) delete(actor string, ref Ref, pre *metav1.Preconditions) error {
	cur, ok := s.objects[ref]
	if !ok {
		return notFound(ref)
	}
	m, _ := meta.Accessor(cur)
	if pre != nil && pre.UID != nil && *pre.UID != m.GetUID() {
		return conflict(ref, fmt.Sprintf("the UID in the precondition (%s) does not match the UID in record (%s)", *pre.UID, m.GetUID()))
	}
	if pre != nil && pre.ResourceVersion != nil && *pre.ResourceVersion != m.GetResourceVersion() {
		return conflict(ref, "the resourceVersion in the precondition does not match")
	}
	if len(m.GetFinalizers()) == 0 {
		s.remove(actor, "delete", ref, cur, cur.DeepCopyObject())
		return nil
	}
	if m.GetDeletionTimestamp() != nil {
		return nil
	}
	obj := cur.DeepCopyObject()
	now := metav1.NewTime(time.Now())
	om, _ := meta.Accessor(obj)
	om.SetDeletionTimestamp(&now)
	s.commit(actor, "delete", ref, cur, obj)
	return nil
}

// commit stores obj with the next resource version and tells the observer and the
// watches.
func (s *Store) commit(actor, verb string, ref Ref, old, obj runtime.Object) {
	s.rv++
	m, _ := meta.Accessor(obj)
	m.SetResourceVersion(strconv.FormatUint(s.rv, 10))
	s.objects[ref] = obj
	typ := watch.Modified
	if old == nil {
		typ = watch.Added
	}
	s.publish(event{typ: typ, ref: ref, obj: obj, rv: s.rv, time: time.Now()})
	if s.observer != nil {
		s.observer(reader{s}, Write{Actor: actor, Verb: verb, Ref: ref, Old: old, New: obj})
	}
}

// remove deletes the object for good; last is its final state, which the DELETED
// event carries.
func (s *Store) remove(actor, verb string, ref Ref, old, last runtime.Object) {
	s.rv++
	m, _ := meta.Accessor(last)
	m.SetResourceVersion(strconv.FormatUint(s.rv, 10))
	delete(s.objects, ref)
	s.publish(event{typ: watch.Deleted, ref: ref, obj: last, rv: s.rv, time: time.Now()})
	if s.observer != nil {
		s.observer(reader{s}, Write{Actor: actor, Verb: verb, Ref: ref, Old: old})
	}
}

func (s *Store) publish(ev event) {
	s.log = append(s.log, ev)
	for w := range s.watchers {
		w.enqueue(ev)
	}
}

// listAsOf returns copies of a resource's objects in a namespace ("" for all) as
// they stood at time t, and the resource version of that state: the changes made
// up to t, replayed from the log.
func (s *Store) listAsOf(resource, namespace string, t time.Time) ([]runtime.Object, uint64) {
	state := map[Ref]runtime.Object{}
	var rv uint64
	for _, ev := range s.log {
		if ev.time.After(t) {
			break
		}
		rv = ev.rv
		if ev.ref.Resource != resource || (namespace != "" && ev.ref.Namespace != namespace) {
			continue
		}
		if ev.typ == watch.Deleted {
			delete(state, ev.ref)
		} else {
			state[ev.ref] = ev.obj
		}
	}
	refs := slices.SortedFunc(maps.Keys(state), func(a, b Ref) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	out := make([]runtime.Object, len(refs))
	for i, ref := range refs {
		out[i] = state[ref].DeepCopyObject()
	}
	return out, rv
}

// list returns copies of a resource's objects in a namespace ("" for all) and
// the resource version they stand at.
func (s *Store) list(resource, namespace string) ([]runtime.Object, uint64) {
	var out []runtime.Object
	for _, obj := range (reader{s}).List(resource) {
		if namespace == "" || refOf(resource, obj).Namespace == namespace {
			out = append(out, obj.DeepCopyObject())
		}
	}
	return out, s.rv
}
