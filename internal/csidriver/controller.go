package csidriver

import (
	"context"
	"maps"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// DevicePathKey is the publish context key under which ControllerPublishVolume
// returns the volume's made-up device path.
const DevicePathKey = "devicePath"

type controllerServer struct {
	csi.UnimplementedControllerServer
	driver *Driver
}

func (s *controllerServer) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return &csi.ControllerGetCapabilitiesResponse{
		Capabilities: []*csi.ControllerServiceCapability{{
			Type: &csi.ControllerServiceCapability_Rpc{
				Rpc: &csi.ControllerServiceCapability_RPC{Type: csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME},
			},
		}},
	}, nil
}

// ControllerPublishVolume publishes a volume on a node. Publishing it again on the same
// node with the same capability succeeds with the same publish context; a different
// capability or read-only flag gives AlreadyExists. A volume published with a
// single-node access mode cannot be published on a second node (FailedPrecondition,
// recorded as a Conflict), and neither can a single-node request for a volume that is
// published elsewhere.
func (s *controllerServer) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (resp *csi.ControllerPublishVolumeResponse, err error) {
	volumeID, nodeID := req.GetVolumeId(), req.GetNodeId()
	d := s.driver
	defer func() { d.record(OpPublish, volumeID, nodeID, status.Code(err)) }()

	mode := req.GetVolumeCapability().GetAccessMode().GetMode()
	switch {
	case volumeID == "":
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	case nodeID == "":
		return nil, status.Error(codes.InvalidArgument, "node_id is required")
	case req.GetVolumeCapability() == nil:
		return nil, status.Error(codes.InvalidArgument, "volume_capability is required")
	case mode == csi.VolumeCapability_AccessMode_UNKNOWN:
		return nil, status.Error(codes.InvalidArgument, "volume_capability.access_mode is required")
	}
	if err := d.wait(ctx); err != nil {
		return nil, err
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	if f, ok := d.takeFaultLocked(OpPublish, volumeID); ok {
		klog.FromContext(ctx).V(2).Info("Injecting fault", "operation", OpPublish, "volumeID", volumeID, "code", f.Code)
		return nil, status.Error(f.Code, f.Message)
	}
	nodes := d.published[volumeID]
	if p, ok := nodes[nodeID]; ok {
		if p.mode != mode || p.readOnly != req.GetReadonly() {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q is published on node %q with access mode %s, read-only %t", volumeID, nodeID, p.mode, p.readOnly)
		}
		return &csi.ControllerPublishVolumeResponse{PublishContext: maps.Clone(p.context)}, nil
	}
	if others := d.nodesLocked(volumeID); len(others) > 0 && !shareable(nodes, mode) {
		d.conflicts = append(d.conflicts, Conflict{VolumeID: volumeID, NodeID: nodeID, PublishedOn: others, Time: time.Now()})
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is already published on node(s) %s", volumeID, strings.Join(others, ", "))
	}
	if nodes == nil {
		nodes = map[string]publication{}
		d.published[volumeID] = nodes
	}
	p := publication{
		mode:     mode,
		readOnly: req.GetReadonly(),
		context:  map[string]string{DevicePathKey: devicePath(volumeID)},
	}
	nodes[nodeID] = p
	return &csi.ControllerPublishVolumeResponse{PublishContext: maps.Clone(p.context)}, nil
}

// ControllerUnpublishVolume unpublishes a volume from a node, or from all its nodes if
// node_id is empty. Unpublishing a volume that is not published succeeds.
func (s *controllerServer) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (resp *csi.ControllerUnpublishVolumeResponse, err error) {
	volumeID, nodeID := req.GetVolumeId(), req.GetNodeId()
	d := s.driver
	stillStaged := false
	defer func() {
		d.recordCall(Call{Operation: OpUnpublish, VolumeID: volumeID, NodeID: nodeID, Code: status.Code(err), StillStaged: stillStaged})
	}()

	if volumeID == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	if err := d.wait(ctx); err != nil {
		return nil, err
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	if f, ok := d.takeFaultLocked(OpUnpublish, volumeID); ok {
		klog.FromContext(ctx).V(2).Info("Injecting fault", "operation", OpUnpublish, "volumeID", volumeID, "code", f.Code)
		return nil, status.Error(f.Code, f.Message)
	}
	_, stillStaged = d.staged[volumeID][nodeID]
	if nodeID == "" {
		stillStaged = len(d.staged[volumeID]) > 0
		delete(d.published, volumeID)
	} else if nodes, ok := d.published[volumeID]; ok {
		delete(nodes, nodeID)
		if len(nodes) == 0 {
			delete(d.published, volumeID)
		}
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

// wait sleeps for the configured delay, or until ctx ends. A call whose context
// ended changes nothing, even when the delay was over too by the time its
// goroutine ran again (a select between two ready cases picks either).
func (d *Driver) wait(ctx context.Context) error {
	delay := d.Delay()
	if delay <= 0 {
		return nil
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	return nil
}

// shareable tells whether a volume with the given publications may be published on
// one more node with mode: only if every one of them, and mode, is multi-node.
func shareable(publications map[string]publication, mode csi.VolumeCapability_AccessMode_Mode) bool {
	if !multiNode(mode) {
		return false
	}
	for _, p := range publications {
		if !multiNode(p.mode) {
			return false
		}
	}
	return true
}

func multiNode(mode csi.VolumeCapability_AccessMode_Mode) bool {
	switch mode {
	case csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:
		return true
	default:
		return false
	}
}

func devicePath(volumeID string) string {
	return "/dev/csi-test/" + volumeID
}
