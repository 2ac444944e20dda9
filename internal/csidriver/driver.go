// Package csidriver is a small in-memory CSI plugin for tests and demos. It serves
// the Identity service and the attach half of the Controller service
// (ControllerPublishVolume / ControllerUnpublishVolume), remembers which volume is
// published on which node, and can be told at run time to fail or to be slow.
//
// With ServeNode it also plays the driver's node plugin for one kubelet: the Node
// service (NodeGetInfo, NodeGetCapabilities with STAGE_UNSTAGE_VOLUME, NodeStage,
// NodePublish, NodeUnpublish, NodeUnstage) on a socket of its own, registered with
// kubelet through the plugin registration directory the way node-driver-registrar
// does. Every Controller and Node call is recorded in one log, in the order the
// driver saw them, with the publish context kubelet passed.
package csidriver

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// Operation names an RPC whose calls are recorded. Controller operations can be made
// to fail.
type Operation string

// The operations the driver records.
const (
	OpPublish       Operation = "ControllerPublishVolume"
	OpUnpublish     Operation = "ControllerUnpublishVolume"
	OpNodeStage     Operation = "NodeStageVolume"
	OpNodePublish   Operation = "NodePublishVolume"
	OpNodeUnpublish Operation = "NodeUnpublishVolume"
	OpNodeUnstage   Operation = "NodeUnstageVolume"
)

// Fault makes calls of one operation on one volume fail with a gRPC status.
type Fault struct {
	Code    codes.Code
	Message string
	// Count is how many calls fail before the fault clears itself; 0 means until cleared.
	Count int
}

// Call is one recorded call. NodeID is the request's node for a Controller call and
// the serving node plugin's for a Node call.
type Call struct {
	Operation Operation
	VolumeID  string
	NodeID    string
	// PublishContext is what NodeStageVolume and NodePublishVolume were given: the
	// VolumeAttachment's status.attachmentMetadata, as kubelet read it.
	PublishContext map[string]string
	// StagingPath and TargetPath are the Node calls' paths.
	StagingPath, TargetPath string
	// StillStaged tells, for a ControllerUnpublishVolume, that a node plugin still
	// had the volume staged on that node: a detach from under a mounted volume.
	StillStaged bool
	Code        codes.Code
	Time        time.Time
}

// Conflict is a ControllerPublishVolume refused because the volume, not published with
// a multi-node access mode, was already published on other nodes. A controller that
// respects single-attach volumes never causes one.
type Conflict struct {
	VolumeID    string
	NodeID      string
	PublishedOn []string
	Time        time.Time
}

type faultKey struct {
	op       Operation
	volumeID string
}

type publication struct {
	mode     csi.VolumeCapability_AccessMode_Mode
	readOnly bool
	context  map[string]string
}

// Driver is the plugin's state. It is safe for concurrent use.
type Driver struct {
	name    string
	version string

	mu        sync.Mutex
	delay     time.Duration
	faults    map[faultKey]*Fault
	published map[string]map[string]publication // volume ID -> node ID
	// staged and mounted are the node plugins' state: volume ID -> node ID -> the
	// staging path, and -> the set of target paths.
	staged    map[string]map[string]string
	mounted   map[string]map[string]map[string]bool
	calls     []Call
	conflicts []Conflict
}

// New returns a driver that reports name from GetPluginInfo.
func New(name string) *Driver {
	return &Driver{
		name:      name,
		version:   "0.1.0",
		faults:    map[faultKey]*Fault{},
		published: map[string]map[string]publication{},
		staged:    map[string]map[string]string{},
		mounted:   map[string]map[string]map[string]bool{},
	}
}

// Name is the driver name reported by GetPluginInfo.
func (d *Driver) Name() string { return d.name }

// Register adds the driver's Identity and Controller services to s.
func (d *Driver) Register(s *grpc.Server) {
	csi.RegisterIdentityServer(s, &identityServer{driver: d})
	csi.RegisterControllerServer(s, &controllerServer{driver: d})
}

// SetDelay makes every later ControllerPublishVolume and ControllerUnpublishVolume
// call wait for delay before doing anything; 0 removes the delay.
func (d *Driver) SetDelay(delay time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.delay = delay
}

// Delay returns the delay set by SetDelay.
func (d *Driver) Delay() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.delay
}

// SetFault makes calls of op on volumeID fail with f until ClearFault, or for f.Count calls.
func (d *Driver) SetFault(op Operation, volumeID string, f Fault) error {
	if op != OpPublish && op != OpUnpublish {
		return fmt.Errorf("set fault: unknown operation %q", op)
	}
	if f.Code == codes.OK {
		return fmt.Errorf("set fault for %s on volume %q: code must not be OK", op, volumeID)
	}
	if f.Count < 0 {
		return fmt.Errorf("set fault for %s on volume %q: negative count %d", op, volumeID, f.Count)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.faults[faultKey{op: op, volumeID: volumeID}] = &f
	return nil
}

// ClearFault removes the fault of op on volumeID, if any.
func (d *Driver) ClearFault(op Operation, volumeID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.faults, faultKey{op: op, volumeID: volumeID})
}

// ClearFaults removes all faults.
func (d *Driver) ClearFaults() {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.faults)
}

// PublishedNodes returns the sorted IDs of the nodes volumeID is published on.
func (d *Driver) PublishedNodes(volumeID string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.nodesLocked(volumeID)
}

// Published returns, for every published volume, the sorted IDs of its nodes.
func (d *Driver) Published() map[string][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string][]string, len(d.published))
	for volumeID := range d.published {
		out[volumeID] = d.nodesLocked(volumeID)
	}
	return out
}

// Calls returns the recorded calls, oldest first.
func (d *Driver) Calls() []Call {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.calls)
}

// CallsFor returns the recorded calls of op on volumeID, oldest first.
func (d *Driver) CallsFor(op Operation, volumeID string) []Call {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Call
	for _, c := range d.calls {
		if c.Operation == op && c.VolumeID == volumeID {
			out = append(out, c)
		}
	}
	return out
}

// Conflicts returns the refused attempts to publish a single-node volume on a
// second node, oldest first.
func (d *Driver) Conflicts() []Conflict {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.conflicts)
}

func (d *Driver) nodesLocked(volumeID string) []string {
	nodes := make([]string, 0, len(d.published[volumeID]))
	for node := range d.published[volumeID] {
		nodes = append(nodes, node)
	}
	sort.Strings(nodes)
	return nodes
}

// takeFaultLocked returns the fault to inject for op on volumeID, counting it down.
func (d *Driver) takeFaultLocked(op Operation, volumeID string) (Fault, bool) {
	key := faultKey{op: op, volumeID: volumeID}
	f, ok := d.faults[key]
	if !ok {
		return Fault{}, false
	}
	if f.Count > 0 {
		f.Count--
		if f.Count == 0 {
			delete(d.faults, key)
		}
	}
	return *f, true
}

func (d *Driver) record(op Operation, volumeID, nodeID string, code codes.Code) {
	d.recordCall(Call{Operation: op, VolumeID: volumeID, NodeID: nodeID, Code: code})
}

// recordCall appends c to the log, stamped with the time.
func (d *Driver) recordCall(c Call) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c.Time = time.Now()
	d.calls = append(d.calls, c)
}
