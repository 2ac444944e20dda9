package csidriver

import (
	"context"
	"maps"
	"os"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// nodeServer is the Node service of the driver's plugin on one node.
type nodeServer struct {
	csi.UnimplementedNodeServer
	driver *Driver
	nodeID string
}

func (s *nodeServer) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: s.nodeID}, nil
}

func (s *nodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{
		Capabilities: []*csi.NodeServiceCapability{{
			Type: &csi.NodeServiceCapability_Rpc{
				Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME},
			},
		}},
	}, nil
}

// NodeStageVolume stages a volume at the staging path kubelet made. As with a real
// disk, the volume must be published on this node first (FailedPrecondition
// otherwise); staging it again at the same path succeeds.
func (s *nodeServer) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (resp *csi.NodeStageVolumeResponse, err error) {
	volumeID, path := req.GetVolumeId(), req.GetStagingTargetPath()
	d := s.driver
	defer func() {
		d.recordCall(Call{Operation: OpNodeStage, VolumeID: volumeID, NodeID: s.nodeID,
			PublishContext: maps.Clone(req.GetPublishContext()), StagingPath: path, Code: status.Code(err)})
	}()
	switch {
	case volumeID == "":
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	case path == "":
		return nil, status.Error(codes.InvalidArgument, "staging_target_path is required")
	case req.GetVolumeCapability() == nil:
		return nil, status.Error(codes.InvalidArgument, "volume_capability is required")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.published[volumeID][s.nodeID]; !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is not published on node %q", volumeID, s.nodeID)
	}
	if staged, ok := d.staged[volumeID][s.nodeID]; ok && staged != path {
		return nil, status.Errorf(codes.AlreadyExists, "volume %q is staged on node %q at %s", volumeID, s.nodeID, staged)
	}
	setIn(d.staged, volumeID, s.nodeID, path)
	return &csi.NodeStageVolumeResponse{}, nil
}

// NodeUnstageVolume unstages a volume. It fails with FailedPrecondition while the
// volume is still published to a target path on this node; unstaging a volume that
// is not staged succeeds.
func (s *nodeServer) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (resp *csi.NodeUnstageVolumeResponse, err error) {
	volumeID, path := req.GetVolumeId(), req.GetStagingTargetPath()
	d := s.driver
	defer func() {
		d.recordCall(Call{Operation: OpNodeUnstage, VolumeID: volumeID, NodeID: s.nodeID, StagingPath: path, Code: status.Code(err)})
	}()
	if volumeID == "" || path == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and staging_target_path are required")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if targets := d.mounted[volumeID][s.nodeID]; len(targets) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is still published on node %q at %v", volumeID, s.nodeID, slices.Sorted(maps.Keys(targets)))
	}
	deleteIn(d.staged, volumeID, s.nodeID)
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// NodePublishVolume publishes a staged volume at the target path, creating the
// directory as a real driver's mount would. A volume not staged on this node at the
// request's staging path gives FailedPrecondition.
func (s *nodeServer) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (resp *csi.NodePublishVolumeResponse, err error) {
	volumeID, staging, target := req.GetVolumeId(), req.GetStagingTargetPath(), req.GetTargetPath()
	d := s.driver
	defer func() {
		d.recordCall(Call{Operation: OpNodePublish, VolumeID: volumeID, NodeID: s.nodeID,
			PublishContext: maps.Clone(req.GetPublishContext()), StagingPath: staging, TargetPath: target, Code: status.Code(err)})
	}()
	switch {
	case volumeID == "":
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	case target == "":
		return nil, status.Error(codes.InvalidArgument, "target_path is required")
	case req.GetVolumeCapability() == nil:
		return nil, status.Error(codes.InvalidArgument, "volume_capability is required")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if got, ok := d.staged[volumeID][s.nodeID]; !ok || got != staging {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is not staged on node %q at %q", volumeID, s.nodeID, staging)
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "creating target path: %v", err)
	}
	targets := d.mounted[volumeID][s.nodeID]
	if targets == nil {
		targets = map[string]bool{}
		setIn(d.mounted, volumeID, s.nodeID, targets)
	}
	targets[target] = true
	return &csi.NodePublishVolumeResponse{}, nil
}

// NodeUnpublishVolume unpublishes a volume from the target path and removes the
// directory, as a real driver does; unpublishing what is not published succeeds.
func (s *nodeServer) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (resp *csi.NodeUnpublishVolumeResponse, err error) {
	volumeID, target := req.GetVolumeId(), req.GetTargetPath()
	d := s.driver
	defer func() {
		d.recordCall(Call{Operation: OpNodeUnpublish, VolumeID: volumeID, NodeID: s.nodeID, TargetPath: target, Code: status.Code(err)})
	}()
	if volumeID == "" || target == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and target_path are required")
	}
	if err := os.RemoveAll(target); err != nil {
		return nil, status.Errorf(codes.Internal, "removing target path: %v", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if targets := d.mounted[volumeID][s.nodeID]; targets != nil {
		delete(targets, target)
		if len(targets) == 0 {
			deleteIn(d.mounted, volumeID, s.nodeID)
		}
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// StagedNodes returns the sorted IDs of the nodes whose plugin has volumeID staged.
func (d *Driver) StagedNodes(volumeID string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Sorted(maps.Keys(d.staged[volumeID]))
}

// MountedNodes returns the sorted IDs of the nodes whose plugin has volumeID
// published to at least one target path.
func (d *Driver) MountedNodes(volumeID string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Sorted(maps.Keys(d.mounted[volumeID]))
}

// setIn sets m[outer][inner] = v, making the inner map if needed.
func setIn[V any](m map[string]map[string]V, outer, inner string, v V) {
	if m[outer] == nil {
		m[outer] = map[string]V{}
	}
	m[outer][inner] = v
}

// deleteIn deletes m[outer][inner], and m[outer] once empty.
func deleteIn[V any](m map[string]map[string]V, outer, inner string) {
	delete(m[outer], inner)
	if len(m[outer]) == 0 {
		delete(m, outer)
	}
}
