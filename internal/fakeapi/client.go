package fakeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// Request describes a request about to be sent, for a Faults to decide on: a
// write (create, update, patch, delete) or a read (get, list).
type Request struct {
	Verb, Resource, Name string
	// Cached is set on a list an informer sends first (resourceVersion "0"),
	// which an API server may serve from its watch cache, behind etcd.
	Cached bool
	// Seq counts this client's requests with the same verb, resource, name and
	// Cached, from 1.
	Seq int
}

// Read tells whether the request only reads.
func (r Request) Read() bool { return r.Verb == "get" || r.Verb == "list" }

func (r Request) String() string {
	if r.Cached {
		return fmt.Sprintf("%s %s/%s (cached) #%d", r.Verb, r.Resource, r.Name, r.Seq)
	}
	return fmt.Sprintf("%s %s/%s #%d", r.Verb, r.Resource, r.Name, r.Seq)
}

// Fault is what goes wrong with one request. The zero Fault is none. A read
// knows only Delay, Err and, for a cached list, Lag.
type Fault struct {
	// Delay holds the request back before it reaches the store.
	Delay time.Duration
	// Err fails the request before it is applied.
	Err error
	// Lag serves a cached list as the store stood that long ago; the watch that
	// follows replays the changes since.
	Lag time.Duration
	// ErrAfter is returned once the request was applied: the caller cannot tell
	// whether it was.
	ErrAfter error
	// Latency holds the response back once the request was applied.
	Latency time.Duration
	// Crash kills the caller at the instant the request is applied: the client is
	// fenced in the same step, so nothing the caller sends later is applied.
	Crash bool
}

// Faults decides the faults of a client. Its methods are called concurrently.
type Faults interface {
	Request(Request) Fault
	Delivery(WatchEvent) Delivery
}

// ClientOptions configure a Client.
type ClientOptions struct {
	// Name is the actor the store's observer sees.
	Name string
	// Faults, if not nil, injects faults.
	Faults Faults
	// OnCrash is called once a Crash fault fenced the client.
	OnCrash func()
	// Logf, if not nil, is told of every fault injected.
	Logf func(format string, args ...any)
	// OnWriteAfterStop, if not nil, is told of every write sent once Stop was
	// called; the write goes ahead.
	OnWriteAfterStop func(Request)
}

// Client serves one caller (a controller incarnation) from a store.
type Client struct {
	s         *Store
	opts      ClientOptions
	fake      *fake.Clientset
	crashOnce sync.Once

	mu      sync.Mutex
	seq     map[string]int
	watches map[string]int

	// Guarded by s.mu.
	fenced  bool
	crashOn string
	stopped bool

	// listMu serves one list at a time, listLag its Lag: the fake clientset's
	// action does not carry the resource version the list asked for.
	listMu  sync.Mutex
	listLag time.Duration
}

// NewClient returns a client of the store.
func (s *Store) NewClient(opts ClientOptions) *Client {
	c := &Client{s: s, opts: opts, fake: &fake.Clientset{}, seq: map[string]int{}, watches: map[string]int{}}
	c.fake.AddReactor("*", "*", c.react)
	c.fake.AddWatchReactor("*", c.reactWatch)
	return c
}

// Interface returns the clientset; the faults apply to its writes of nodes and
// VolumeAttachments.
func (c *Client) Interface() kubernetes.Interface {
	return clientset{Interface: c.fake, c: c}
}

// Fence makes the store refuse everything the client sends from now on.
func (c *Client) Fence() {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.fenced = true
}

// Stop records that the caller stopped (lost its lease) without fencing the
// client: what its goroutines still send is applied, and each write sent from now
// on is reported to OnWriteAfterStop.
func (c *Client) Stop() {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.stopped = true
}

var errFenced = errors.New("connection refused: this client was stopped")

func (c *Client) logf(format string, args ...any) {
	if c.opts.Logf != nil {
		c.opts.Logf(format, args...)
	}
}

// fault decides the fault of a request about to be sent.
func (c *Client) fault(verb, resource, name string, cached bool) (Request, Fault) {
	c.mu.Lock()
	key := requestKey(verb, resource, name)
	if cached {
		key += " cached"
	}
	c.seq[key]++
	r := Request{Verb: verb, Resource: resource, Name: name, Cached: cached, Seq: c.seq[key]}
	c.mu.Unlock()
	if c.opts.Faults == nil {
		return r, Fault{}
	}
	f := c.opts.Faults.Request(r)
	if f != (Fault{}) {
		c.logf("%s: fault on %s: %s", c.opts.Name, r, describe(f))
	}
	return r, f
}

func describe(f Fault) string {
	var s string
	add := func(part string) {
		if s != "" {
			s += ", "
		}
		s += part
	}
	if f.Delay > 0 {
		add("delayed " + f.Delay.String())
	}
	if f.Err != nil {
		add("error before apply: " + f.Err.Error())
	}
	if f.Crash {
		add("caller killed at apply")
	}
	if f.ErrAfter != nil {
		add("applied, error returned: " + f.ErrAfter.Error())
	}
	if f.Latency > 0 {
		add("response delayed " + f.Latency.String())
	}
	if f.Lag > 0 {
		add("served as of " + f.Lag.String() + " ago")
	}
	return s
}

// call runs one mutating request with its fault.
func call[T any](ctx context.Context, c *Client, verb, resource, name string, do func() (T, error)) (T, error) {
	var zero T
	// A request whose context has ended is not sent, as client-go does.
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	r, f := c.fault(verb, resource, name, false)
	c.s.mu.Lock()
	late := c.stopped
	c.s.mu.Unlock()
	if late && c.opts.OnWriteAfterStop != nil {
		c.opts.OnWriteAfterStop(r)
	}
	if !sleep(ctx, f.Delay) {
		return zero, ctx.Err()
	}
	if f.Err != nil {
		return zero, f.Err
	}
	if f.Crash {
		c.s.mu.Lock()
		c.crashOn = requestKey(r.Verb, r.Resource, r.Name)
		c.s.mu.Unlock()
	}
	out, err := do()
	if f.Crash {
		c.Fence()
		if c.opts.OnCrash != nil {
			c.crashOnce.Do(c.opts.OnCrash)
		}
		return zero, errFenced
	}
	if !sleep(ctx, f.Latency) {
		return zero, ctx.Err()
	}
	if err == nil && f.ErrAfter != nil {
		return zero, f.ErrAfter
	}
	return out, err
}

// read runs one read with its fault. A cached list's Lag holds for the list
// sent: the reactor serves it from the store's past.
func read[T any](ctx context.Context, c *Client, verb, resource, name string, cached bool, do func() (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	_, f := c.fault(verb, resource, name, cached)
	if !sleep(ctx, f.Delay) {
		return zero, ctx.Err()
	}
	if f.Err != nil {
		return zero, f.Err
	}
	if verb != "list" {
		return do()
	}
	c.listMu.Lock()
	defer c.listMu.Unlock()
	c.listLag = 0
	if cached {
		c.listLag = f.Lag
	}
	return do()
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// react serves a request from the store.
func (c *Client) react(action clienttesting.Action) (bool, runtime.Object, error) {
	resource := action.GetResource().Resource
	k, ok := kinds[resource]
	if !ok {
		return true, nil, apierrors.NewNotFound(action.GetResource().GroupResource(), "")
	}
	ns := action.GetNamespace()
	// Switch on the verb: the action types' interfaces overlap (a patch has a
	// GetName too).
	switch action.GetVerb() {
	case "get":
		a := action.(clienttesting.GetAction)
		c.s.mu.Lock()
		defer c.s.mu.Unlock()
		obj, ok := c.s.objects[Ref{resource, ns, a.GetName()}]
		if !ok {
			return true, nil, notFound(Ref{resource, ns, a.GetName()})
		}
		return true, obj.DeepCopyObject(), nil
	case "list":
		lag := c.listLag
		c.s.mu.Lock()
		items, rv := c.s.list(resource, ns)
		if lag > 0 {
			items, rv = c.s.listAsOf(resource, ns, time.Now().Add(-lag))
		}
		c.s.mu.Unlock()
		list := k.newList()
		if err := meta.SetList(list, items); err != nil {
			return true, nil, err
		}
		lm, _ := meta.ListAccessor(list)
		lm.SetResourceVersion(strconv.FormatUint(rv, 10))
		return true, list, nil
	case "create":
		a := action.(clienttesting.CreateAction)
		return c.write("create", refOf(resource, a.GetObject()), func() (runtime.Object, error) {
			return c.s.create(c.opts.Name, a.GetObject())
		})
	case "update":
		a := action.(clienttesting.UpdateAction)
		obj := a.GetObject().DeepCopyObject()
		ref := refOf(resource, obj)
		return c.write("update", ref, func() (runtime.Object, error) {
			return c.s.update(c.opts.Name, "update", ref, obj, a.GetSubresource())
		})
	case "patch":
		a := action.(clienttesting.PatchAction)
		ref := Ref{resource, ns, a.GetName()}
		return c.write("patch", ref, func() (runtime.Object, error) {
			return c.s.patch(c.opts.Name, ref, a.GetPatchType(), a.GetPatch(), a.GetSubresource())
		})
	case "delete":
		a := action.(clienttesting.DeleteAction)
		ref := Ref{resource, ns, a.GetName()}
		return c.write("delete", ref, func() (runtime.Object, error) {
			return nil, c.s.delete(c.opts.Name, ref, a.GetDeleteOptions().Preconditions)
		})
	}
	return true, nil, apierrors.NewMethodNotSupported(action.GetResource().GroupResource(), action.GetVerb())
}

// write applies a write unless the client is fenced; a pending Crash fault for
// it fences the client in the same step.
func (c *Client) write(verb string, ref Ref, apply func() (runtime.Object, error)) (bool, runtime.Object, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.fenced {
		return true, nil, errFenced
	}
	obj, err := apply()
	if c.crashOn != "" && c.crashOn == requestKey(verb, ref.Resource, ref.Name) {
		c.fenced = true
	}
	return true, obj, err
}

func requestKey(verb, resource, name string) string {
	return verb + " " + resource + "/" + name
}

func (c *Client) reactWatch(action clienttesting.Action) (bool, watch.Interface, error) {
	resource := action.GetResource().Resource
	if _, ok := kinds[resource]; !ok {
		return true, nil, apierrors.NewNotFound(action.GetResource().GroupResource(), "")
	}
	c.mu.Lock()
	c.watches[resource]++
	n := c.watches[resource]
	c.mu.Unlock()
	var rv string
	if a, ok := action.(clienttesting.WatchAction); ok {
		rv = a.GetWatchRestrictions().ResourceVersion
	}
	w, err := c.s.watch(resource, action.GetNamespace(), rv, func(ev event) Delivery {
		if c.opts.Faults == nil {
			return Delivery{}
		}
		d := c.opts.Faults.Delivery(WatchEvent{Watch: n, Type: ev.typ, Ref: ev.ref, ResourceVersion: ev.rv, Time: ev.time})
		switch {
		case d.End == Expire:
			c.logf("%s: watch of %s #%d expired (410) instead of delivering %s %s rv %d", c.opts.Name, resource, n, ev.typ, ev.ref, ev.rv)
		case d.End == Resume:
			c.logf("%s: watch of %s #%d ends after %s %s rv %d (resumes)", c.opts.Name, resource, n, ev.typ, ev.ref, ev.rv)
		case d.Delay > 0:
			c.logf("%s: watch of %s #%d delays %s %s rv %d by %s", c.opts.Name, resource, n, ev.typ, ev.ref, ev.rv, d.Delay)
		}
		return d
	})
	return true, w, err
}

// update replaces an object as a client's update does: the status subresource
// changes only the status, the main resource everything but the status; a
// resourceVersion in obj must be the current one.
func (s *Store) update(actor, verb string, ref Ref, obj runtime.Object, subresource string) (runtime.Object, error) {
	cur, ok := s.objects[ref]
	if !ok {
		return nil, notFound(ref)
	}
	m, _ := meta.Accessor(obj)
	curMeta, _ := meta.Accessor(cur)
	if rv := m.GetResourceVersion(); rv != "" && rv != curMeta.GetResourceVersion() {
		return nil, conflict(ref, "the object has been modified; please apply your changes to the latest version and try again")
	}
	merged, err := withStatusOf(cur, obj, subresource == "status")
	if err != nil {
		return nil, err
	}
	return s.replace(actor, verb, ref, merged)
}

// withStatusOf returns obj with its status taken from cur (for the main resource),
// or cur with its status taken from obj (for the status subresource).
func withStatusOf(cur, obj runtime.Object, statusOnly bool) (runtime.Object, error) {
	curU, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cur)
	if err != nil {
		return nil, err
	}
	objU, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	base, from := objU, curU
	if statusOnly {
		base, from = curU, objU
	}
	if status, ok := from["status"]; ok {
		base["status"] = status
	} else {
		delete(base, "status")
	}
	out := cur.DeepCopyObject()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(base, out); err != nil {
		return nil, err
	}
	return out, nil
}

// patch applies a JSON, merge or strategic merge patch. A resourceVersion the
// patch sets is a precondition, as on an API server.
func (s *Store) patch(actor string, ref Ref, pt types.PatchType, data []byte, subresource string) (runtime.Object, error) {
	cur, ok := s.objects[ref]
	if !ok {
		return nil, notFound(ref)
	}
	orig, err := json.Marshal(cur)
	if err != nil {
		return nil, err
	}
	var patched []byte
	switch pt {
	case types.JSONPatchType:
		p, err := jsonpatch.DecodePatch(data)
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		patched, err = p.Apply(orig)
		if err != nil {
			return nil, apierrors.NewInvalid(schema.GroupKind{Group: kinds[ref.Resource].group, Kind: ref.Resource}, ref.Name, nil)
		}
	case types.MergePatchType:
		patched, err = jsonpatch.MergePatch(orig, data)
	case types.StrategicMergePatchType:
		patched, err = strategicpatch.StrategicMergePatch(orig, data, kinds[ref.Resource].newObject())
	default:
		return nil, apierrors.NewBadRequest("unsupported patch type " + string(pt))
	}
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	obj := kinds[ref.Resource].newObject()
	if err := json.Unmarshal(patched, obj); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	return s.update(actor, "patch", ref, obj, subresource)
}
