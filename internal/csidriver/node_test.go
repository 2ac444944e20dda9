package csidriver

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2/ktesting"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// startNode serves a driver's controller plugin and its node plugin for node n1, as
// ServeNode does for a hollow kubelet, and connects clients to both.
func startNode(t *testing.T) (*Driver, clients, csi.NodeClient, registerapi.RegistrationClient, *NodePlugin, string) {
	t.Helper()
	d, c := startDriver(t)
	dir, err := os.MkdirTemp("", "csinode")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	registry := filepath.Join(dir, "plugins_registry")
	if err := os.Mkdir(registry, 0o750); err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	p, err := ServeNode(ctx, d, "n1", filepath.Join(dir, "csi.sock"), registry)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	dial := func(path string) *grpc.ClientConn {
		conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	return d, c, csi.NewNodeClient(dial(filepath.Join(dir, "csi.sock"))),
		registerapi.NewRegistrationClient(dial(filepath.Join(registry, testDriverName+"-reg.sock"))), p, dir
}

func TestRegistration(t *testing.T) {
	_, _, node, reg, p, dir := startNode(t)
	ctx := t.Context()
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	want := &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: testDriverName, Endpoint: filepath.Join(dir, "csi.sock"), SupportedVersions: []string{"1.0.0"}}
	if info.Type != want.Type || info.Name != want.Name || info.Endpoint != want.Endpoint || !reflect.DeepEqual(info.SupportedVersions, want.SupportedVersions) {
		t.Errorf("GetInfo = %v, want %v", info, want)
	}
	for _, st := range []*registerapi.RegistrationStatus{{PluginRegistered: false, Error: "bad version"}, {PluginRegistered: true}} {
		if _, err := reg.NotifyRegistrationStatus(ctx, st); err != nil {
			t.Fatalf("NotifyRegistrationStatus: %v", err)
		}
	}
	if n, lastErr := p.Registrations(); n != 1 || lastErr != "bad version" {
		t.Errorf("Registrations() = %d, %q; want 1, %q", n, lastErr, "bad version")
	}

	nodeInfo, err := node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil || nodeInfo.GetNodeId() != "n1" {
		t.Errorf("NodeGetInfo = %v, %v; want node ID n1", nodeInfo, err)
	}
	caps, err := node.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil || len(caps.GetCapabilities()) != 1 || caps.GetCapabilities()[0].GetRpc().GetType() != csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME {
		t.Errorf("NodeGetCapabilities = %v, %v; want only STAGE_UNSTAGE_VOLUME", caps, err)
	}
}

// nodeStep is one call of TestNodeService: a Node call, or, for OpPublish and
// OpUnpublish, the Controller call on node n1.
type nodeStep struct {
	op      Operation
	volume  string
	staging string
	target  string
	want    codes.Code
}

func TestNodeService(t *testing.T) {
	tests := []struct {
		name        string
		steps       []nodeStep
		wantStaged  []string
		wantMounted []string
	}{
		{
			name: "stage and publish after ControllerPublishVolume",
			steps: []nodeStep{
				{op: OpPublish, volume: "v1"},
				{op: OpNodeStage, volume: "v1", staging: "s1"},
				{op: OpNodeStage, volume: "v1", staging: "s1"},
				{op: OpNodePublish, volume: "v1", staging: "s1", target: "t1"},
				{op: OpNodePublish, volume: "v1", staging: "s1", target: "t2"},
			},
			wantStaged:  []string{"n1"},
			wantMounted: []string{"n1"},
		},
		{
			name: "stage before ControllerPublishVolume",
			steps: []nodeStep{
				{op: OpNodeStage, volume: "v1", staging: "s1", want: codes.FailedPrecondition},
			},
		},
		{
			name: "stage at a second path",
			steps: []nodeStep{
				{op: OpPublish, volume: "v1"},
				{op: OpNodeStage, volume: "v1", staging: "s1"},
				{op: OpNodeStage, volume: "v1", staging: "s2", want: codes.AlreadyExists},
			},
			wantStaged: []string{"n1"},
		},
		{
			name: "publish what is not staged",
			steps: []nodeStep{
				{op: OpPublish, volume: "v1"},
				{op: OpNodePublish, volume: "v1", staging: "s1", target: "t1", want: codes.FailedPrecondition},
			},
		},
		{
			name: "unstage while published",
			steps: []nodeStep{
				{op: OpPublish, volume: "v1"},
				{op: OpNodeStage, volume: "v1", staging: "s1"},
				{op: OpNodePublish, volume: "v1", staging: "s1", target: "t1"},
				{op: OpNodeUnstage, volume: "v1", staging: "s1", want: codes.FailedPrecondition},
			},
			wantStaged:  []string{"n1"},
			wantMounted: []string{"n1"},
		},
		{
			name: "tear down in order, twice",
			steps: []nodeStep{
				{op: OpPublish, volume: "v1"},
				{op: OpNodeStage, volume: "v1", staging: "s1"},
				{op: OpNodePublish, volume: "v1", staging: "s1", target: "t1"},
				{op: OpNodeUnpublish, volume: "v1", target: "t1"},
				{op: OpNodeUnpublish, volume: "v1", target: "t1"},
				{op: OpNodeUnstage, volume: "v1", staging: "s1"},
				{op: OpNodeUnstage, volume: "v1", staging: "s1"},
				{op: OpUnpublish, volume: "v1"},
			},
		},
		{
			name: "invalid requests",
			steps: []nodeStep{
				{op: OpNodeStage, volume: "", staging: "s1", want: codes.InvalidArgument},
				{op: OpNodeStage, volume: "v1", want: codes.InvalidArgument},
				{op: OpNodePublish, volume: "v1", staging: "s1", want: codes.InvalidArgument},
				{op: OpNodeUnpublish, volume: "v1", want: codes.InvalidArgument},
				{op: OpNodeUnstage, volume: "", staging: "s1", want: codes.InvalidArgument},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, c, node, _, _, dir := startNode(t)
			ctx := t.Context()
			path := func(p string) string {
				if p == "" {
					return ""
				}
				return filepath.Join(dir, p)
			}
			for i, s := range tt.steps {
				var err error
				switch s.op {
				case OpPublish:
					_, err = publish(ctx, c, s.volume, "n1", rwo, false)
				case OpUnpublish:
					err = unpublish(ctx, c, s.volume, "n1")
				case OpNodeStage:
					_, err = node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: s.volume, StagingTargetPath: path(s.staging),
						VolumeCapability: capability(rwo), PublishContext: map[string]string{DevicePathKey: "/dev/x"}})
				case OpNodePublish:
					_, err = node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: s.volume, StagingTargetPath: path(s.staging),
						TargetPath: path(s.target), VolumeCapability: capability(rwo)})
				case OpNodeUnpublish:
					_, err = node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: s.volume, TargetPath: path(s.target)})
				case OpNodeUnstage:
					_, err = node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: s.volume, StagingTargetPath: path(s.staging)})
				}
				if got := status.Code(err); got != s.want {
					t.Fatalf("step %d (%+v): got %v, want code %v", i, s, err, s.want)
				}
				if s.op == OpNodePublish && s.want == codes.OK {
					if _, err := os.Stat(path(s.target)); err != nil {
						t.Errorf("step %d: NodePublishVolume did not create the target path: %v", i, err)
					}
				}
			}
			if got := d.StagedNodes("v1"); !slices.Equal(got, tt.wantStaged) {
				t.Errorf("StagedNodes(v1) = %v, want %v", got, tt.wantStaged)
			}
			if got := d.MountedNodes("v1"); !slices.Equal(got, tt.wantMounted) {
				t.Errorf("MountedNodes(v1) = %v, want %v", got, tt.wantMounted)
			}
			if got := len(d.Calls()); got != len(tt.steps) {
				t.Errorf("recorded %d calls, want %d", got, len(tt.steps))
			}
		})
	}
}

func TestNodeCallsRecordPublishContextAndStillStaged(t *testing.T) {
	d, c, node, _, _, dir := startNode(t)
	ctx := t.Context()
	resp, err := publish(ctx, c, "v1", "n1", rwo, false)
	if err != nil {
		t.Fatal(err)
	}
	staging := filepath.Join(dir, "s1")
	if _, err := node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "v1", StagingTargetPath: staging,
		VolumeCapability: capability(rwo), PublishContext: resp.GetPublishContext()}); err != nil {
		t.Fatal(err)
	}
	if err := unpublish(ctx, c, "v1", "n1"); err != nil {
		t.Fatal(err)
	}
	stage, detach := d.CallsFor(OpNodeStage, "v1"), d.CallsFor(OpUnpublish, "v1")
	if len(stage) != 1 || !reflect.DeepEqual(stage[0].PublishContext, resp.GetPublishContext()) || stage[0].StagingPath != staging || stage[0].NodeID != "n1" {
		t.Errorf("NodeStageVolume calls %+v, want one on n1 at %s with publish context %v", stage, staging, resp.GetPublishContext())
	}
	if len(detach) != 1 || !detach[0].StillStaged {
		t.Errorf("ControllerUnpublishVolume calls %+v, want one marked StillStaged", detach)
	}
}

func TestServeNodeRejectsLongSocketPaths(t *testing.T) {
	d := New(testDriverName)
	long := "/tmp/" + strings.Repeat("x", maxSocketPath)
	if _, err := ServeNode(t.Context(), d, "n1", filepath.Join(long, "csi.sock"), long); err == nil {
		t.Error("ServeNode with a socket path over the limit succeeded")
	}
}
