// Package simworld simulates, on a fakeapi store, everything around an attach/detach
// controller: a workload of pods using ReadWriteOnce, ReadWriteOncePod and
// ReadWriteMany volumes, CSI, in-tree iSCSI and Fibre Channel PVs, and iSCSI
// volumes inline in the pod, moving between nodes; nodes going NotReady (their
// kubelet stopped), tainted out of service, deleted and created again; each
// node's kubelet and the CSI external-attacher, slow and failing at times
// (internal/sim's, each on a client of the store); pod garbage collection; the
// cloud provider's shutdown taint on nodes not Ready; and another tool that
// copies VolumeAttachments in use. The iSCSI and Fibre Channel volumes have no
// VolumeAttachment: node status listing them is the whole attach.
//
// The world runs on one goroutine from a schedule of timed steps, every choice
// drawn from the one *rand.Rand it is given. The kubelets and the attacher run
// on goroutines of their own and draw from a generator of their own, seeded
// from it: what they do depends on the seed and on when they run.
package simworld

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/attachdetach-controller/attachdetach-controller/internal/fakeapi"
	"github.com/attachdetach-controller/attachdetach-controller/internal/sim"
)

// Driver is the CSI driver of every simulated volume.
const Driver = "sim.csi.example.com"

// Config sizes the world.
type Config struct {
	Nodes, Volumes int
	// AttachFailure and DetachFailure are the odds that one attempt of the
	// external-attacher fails; SlowAttach bounds the rare slow attempt.
	AttachFailure, DetachFailure float64
	SlowAttach                   time.Duration
	// Copies is the odds that a step of the workload copies a VolumeAttachment
	// in use under another name, as another tool would.
	Copies float64
	// Settle, if not nil, is called before each step once the clock reached its
	// time, to let everything else react first (synctest.Wait).
	Settle func()
	// Logf records what the world does.
	Logf func(format string, args ...any)
}

// World is the simulated cluster around the controller.
type World struct {
	store  *fakeapi.Store
	mounts *sim.Mounts
	rng    *rand.Rand
	cfg    Config
	draws  *agentDraws

	steps   steps
	seq     int
	changes bool // the workload still changes things

	nodes   map[string]*node
	volumes []*volume
	// inline are the iSCSI volumes pods may use inline, with no claim.
	inline  []*corev1.ISCSIVolumeSource
	pods    int
	kubelet *sim.Kubelet
}

type node struct {
	name string
	// exists: the Node object exists; ready: its kubelet runs.
	exists, ready bool
}

type volume struct {
	pv, claim, namespace string
	mode                 corev1.PersistentVolumeAccessMode
	// source is the PV's volume source: CSI, iSCSI or Fibre Channel.
	source corev1.PersistentVolumeSource
	// pvCreated is false for a PV that appears after its claim was bound.
	pvCreated bool
}

// volumeSource draws the source of the i-th volume: mostly CSI (a quarter of them
// with a '^' in the handle, where the unique name splits), else iSCSI or Fibre
// Channel by target WWNs and LUN or by WWIDs.
func (w *World) volumeSource(i int) corev1.PersistentVolumeSource {
	lun := int32(i)
	switch w.rng.IntN(8) {
	case 0, 1:
		return corev1.PersistentVolumeSource{ISCSI: &corev1.ISCSIPersistentVolumeSource{
			TargetPortal: fmt.Sprintf("10.0.0.%d:3260", 1+w.rng.IntN(2)), IQN: "iqn.2026-11.com.example:storage", Lun: lun,
		}}
	case 2:
		return corev1.PersistentVolumeSource{FC: &corev1.FCVolumeSource{TargetWWNs: []string{"500a0981891b8dc5", "500a0981991b8dc5"}, Lun: &lun}}
	case 3:
		return corev1.PersistentVolumeSource{FC: &corev1.FCVolumeSource{WWIDs: []string{fmt.Sprintf("3600508b400105e21000090000049%04d", i)}}}
	}
	handle := fmt.Sprintf("vol-%d", i)
	if w.rng.IntN(4) == 0 {
		handle = fmt.Sprintf("vol^%d", i)
	}
	return corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: Driver, VolumeHandle: handle}}
}

// describeSource is a volume source for the log.
func describeSource(src corev1.PersistentVolumeSource) string {
	switch {
	case src.CSI != nil:
		return fmt.Sprintf("CSI handle %q", src.CSI.VolumeHandle)
	case src.ISCSI != nil:
		return fmt.Sprintf("iSCSI %s %s lun %d", src.ISCSI.TargetPortal, src.ISCSI.IQN, src.ISCSI.Lun)
	}
	return "FC " + sim.FCVolumeName(src.FC)
}

// New returns a world on the store, sharing the mount table with whoever checks it.
func New(store *fakeapi.Store, mounts *sim.Mounts, rng *rand.Rand, cfg Config) *World {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	draws := &agentDraws{
		rng:        rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())),
		failAttach: cfg.AttachFailure, failDetach: cfg.DetachFailure, maxDelay: cfg.SlowAttach,
	}
	return &World{store: store, mounts: mounts, rng: rng, cfg: cfg, draws: draws, nodes: map[string]*node{}}
}

// step is one scheduled action.
type step struct {
	at  time.Time
	seq int
	do  func()
}

type steps []step

func (s steps) Len() int { return len(s) }
func (s steps) Less(i, j int) bool {
	if !s[i].at.Equal(s[j].at) {
		return s[i].at.Before(s[j].at)
	}
	return s[i].seq < s[j].seq
}
func (s steps) Swap(i, j int) { s[i], s[j] = s[j], s[i] }
func (s *steps) Push(x any)   { *s = append(*s, x.(step)) }
func (s *steps) Pop() any {
	old := *s
	x := old[len(old)-1]
	*s = old[:len(old)-1]
	return x
}

// After schedules f after d.
func (w *World) After(d time.Duration, f func()) {
	w.seq++
	heap.Push(&w.steps, step{at: time.Now().Add(d), seq: w.seq, do: f})
}

// RunUntil runs the scheduled steps until the clock reaches t.
func (w *World) RunUntil(t time.Time) {
	for len(w.steps) > 0 && !w.steps[0].at.After(t) {
		s := heap.Pop(&w.steps).(step)
		time.Sleep(time.Until(s.at))
		if w.cfg.Settle != nil {
			w.cfg.Settle()
		}
		s.do()
	}
	time.Sleep(time.Until(t))
	if w.cfg.Settle != nil {
		w.cfg.Settle()
	}
}

func (w *World) logf(format string, args ...any) { w.cfg.Logf("world: "+format, args...) }

// jitter returns a random duration in [lo, hi).
func (w *World) jitter(lo, hi time.Duration) time.Duration { return between(w.rng, lo, hi) }

func (w *World) create(obj runtime.Object) {
	if _, err := w.store.Create("world", obj); err != nil {
		panic(fmt.Sprintf("simworld: creating %T: %v", obj, err))
	}
}

// mutate changes an object the world knows exists.
func (w *World) mutate(actor string, ref fakeapi.Ref, f func(obj runtime.Object) bool) {
	if err := w.store.Mutate(actor, ref, f); err != nil {
		panic(fmt.Sprintf("simworld: %s changing %s: %v", actor, ref, err))
	}
}

// Start creates the CSIDriver, the nodes, the volumes and claims and a few pods,
// and starts the kubelets and the external-attacher until ctx ends, pod garbage
// collection and the workload, which changes things until StopChanges.
func (w *World) Start(ctx context.Context) error {
	w.create(&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: Driver}, Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(true)}})
	for i := range w.cfg.Nodes {
		w.createNode(fmt.Sprintf("node-%d", i))
	}
	modes := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadWriteOnce, corev1.ReadWriteOncePod, corev1.ReadWriteMany, corev1.ReadWriteMany}
	for i := range w.cfg.Volumes {
		v := &volume{
			pv:        fmt.Sprintf("pv-%d", i),
			claim:     fmt.Sprintf("claim-%d", i),
			namespace: []string{"ns-a", "ns-b"}[w.rng.IntN(2)],
			mode:      modes[w.rng.IntN(len(modes))],
			source:    w.volumeSource(i),
			pvCreated: w.rng.IntN(5) > 0,
		}
		w.volumes = append(w.volumes, v)
		w.logf("volume %s (%s, %s) claim %s/%s, PV created now: %v", v.pv, v.mode, describeSource(v.source), v.namespace, v.claim, v.pvCreated)
		w.create(&corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: v.namespace, Name: v.claim},
			Spec:       corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{v.mode}, VolumeName: v.pv},
			Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound},
		})
		if v.pvCreated {
			w.createPV(v)
		}
	}
	for i := range 2 {
		w.inline = append(w.inline, &corev1.ISCSIVolumeSource{TargetPortal: "10.0.1.1:3260", IQN: "iqn.2026-11.com.example:inline", Lun: int32(i)})
	}
	for range w.cfg.Nodes {
		w.createPod()
	}
	if err := w.startAgents(ctx); err != nil {
		return err
	}
	w.changes = true
	w.After(5*time.Second, w.podGCLoop)
	w.After(w.jitter(0, 2*time.Second), w.workloadLoop)
	return nil
}

func (w *World) createPV(v *volume) {
	claim, ok := getObject[*corev1.PersistentVolumeClaim](w.store, v.namespace, v.claim)
	if !ok {
		panic("simworld: claim " + v.claim + " missing")
	}
	w.create(&corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: v.pv},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes:            []corev1.PersistentVolumeAccessMode{v.mode},
			ClaimRef:               &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: v.namespace, Name: v.claim, UID: claim.UID},
			PersistentVolumeSource: *v.source.DeepCopy(),
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeBound},
	})
	v.pvCreated = true
}

// getObject reads a copy of one object.
func getObject[T runtime.Object](s *fakeapi.Store, namespace, name string) (T, bool) {
	var out T
	var ok bool
	s.Read(func(r fakeapi.Reader) {
		var obj T
		if obj, ok = fakeapi.Get[T](r, namespace, name); ok {
			out = obj.DeepCopyObject().(T)
		}
	})
	return out, ok
}

// StopChanges ends the workload: from now on nodes come back Ready and untainted,
// the external-attacher stops failing, and what was under way finishes, so that a
// correct controller converges.
func (w *World) StopChanges() {
	w.changes = false
	w.draws.stopFailing()
	w.logf("changes stop: every node comes back Ready and untainted")
	for _, name := range w.nodeNames() {
		n := w.nodes[name]
		if !n.exists {
			continue
		}
		w.setTaint(n, false)
		if !n.ready {
			w.setReady(n, true)
		}
	}
}
