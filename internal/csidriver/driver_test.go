package csidriver

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2/ktesting"
)

const testDriverName = "test.csi.example.com"

type clients struct {
	identity   csi.IdentityClient
	controller csi.ControllerClient
}

// startDriver serves a new driver on a unix socket in a short temporary directory
// (socket paths are limited to about 100 bytes) and connects a gRPC client to it.
func startDriver(t *testing.T) (*Driver, clients) {
	t.Helper()
	dir, err := os.MkdirTemp("", "csidriver")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	d := New(testDriverName)
	_, ctx := ktesting.NewTestContext(t)
	srv, err := Serve(ctx, d, "unix://"+filepath.Join(dir, "csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(srv.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return d, clients{identity: csi.NewIdentityClient(conn), controller: csi.NewControllerClient(conn)}
}

func capability(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

func publish(ctx context.Context, c clients, volumeID, nodeID string, mode csi.VolumeCapability_AccessMode_Mode, readOnly bool) (*csi.ControllerPublishVolumeResponse, error) {
	req := &csi.ControllerPublishVolumeRequest{VolumeId: volumeID, NodeId: nodeID, Readonly: readOnly}
	if mode != csi.VolumeCapability_AccessMode_UNKNOWN {
		req.VolumeCapability = capability(mode)
	}
	return c.controller.ControllerPublishVolume(ctx, req)
}

func unpublish(ctx context.Context, c clients, volumeID, nodeID string) error {
	_, err := c.controller.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: volumeID, NodeId: nodeID})
	return err
}

func TestIdentity(t *testing.T) {
	_, c := startDriver(t)
	ctx := t.Context()

	info, err := c.identity.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		t.Fatalf("GetPluginInfo: %v", err)
	}
	if info.GetName() != testDriverName || info.GetVendorVersion() == "" {
		t.Errorf("GetPluginInfo = %v, want name %q and a version", info, testDriverName)
	}

	caps, err := c.identity.GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
	if err != nil {
		t.Fatalf("GetPluginCapabilities: %v", err)
	}
	if len(caps.GetCapabilities()) != 1 || caps.GetCapabilities()[0].GetService().GetType() != csi.PluginCapability_Service_CONTROLLER_SERVICE {
		t.Errorf("GetPluginCapabilities = %v, want only CONTROLLER_SERVICE", caps)
	}

	probe, err := c.identity.Probe(ctx, &csi.ProbeRequest{})
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	if !probe.GetReady().GetValue() {
		t.Errorf("Probe = %v, want ready", probe)
	}
}

func TestControllerCapabilitiesAndUnimplemented(t *testing.T) {
	_, c := startDriver(t)
	ctx := t.Context()

	caps, err := c.controller.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatalf("ControllerGetCapabilities: %v", err)
	}
	if len(caps.GetCapabilities()) != 1 || caps.GetCapabilities()[0].GetRpc().GetType() != csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME {
		t.Errorf("ControllerGetCapabilities = %v, want only PUBLISH_UNPUBLISH_VOLUME", caps)
	}

	_, err = c.controller.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "v"})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("CreateVolume: got %v, want Unimplemented", err)
	}
	_, err = c.controller.ListVolumes(ctx, &csi.ListVolumesRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("ListVolumes: got %v, want Unimplemented", err)
	}
}

type step struct {
	unpublish bool
	volume    string
	node      string
	mode      csi.VolumeCapability_AccessMode_Mode
	readOnly  bool
	want      codes.Code
}

const (
	rwo = csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	rwx = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	rox = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
)

func TestPublishUnpublish(t *testing.T) {
	tests := []struct {
		name          string
		steps         []step
		wantPublished map[string][]string
		wantConflicts int
	}{
		{
			name:          "publish",
			steps:         []step{{volume: "v1", node: "n1", mode: rwo}},
			wantPublished: map[string][]string{"v1": {"n1"}},
		},
		{
			name: "publish again on the same node is idempotent",
			steps: []step{
				{volume: "v1", node: "n1", mode: rwo},
				{volume: "v1", node: "n1", mode: rwo},
			},
			wantPublished: map[string][]string{"v1": {"n1"}},
		},
		{
			name: "publish again with another capability",
			steps: []step{
				{volume: "v1", node: "n1", mode: rwo},
				{volume: "v1", node: "n1", mode: rwx, want: codes.AlreadyExists},
			},
			wantPublished: map[string][]string{"v1": {"n1"}},
		},
		{
			name: "publish again read-only",
			steps: []step{
				{volume: "v1", node: "n1", mode: rwo},
				{volume: "v1", node: "n1", mode: rwo, readOnly: true, want: codes.AlreadyExists},
			},
			wantPublished: map[string][]string{"v1": {"n1"}},
		},
		{
			name: "single-node volume on a second node",
			steps: []step{
				{volume: "v1", node: "n1", mode: rwo},
				{volume: "v1", node: "n2", mode: rwo, want: codes.FailedPrecondition},
			},
			wantPublished: map[string][]string{"v1": {"n1"}},
			wantConflicts: 1,
		},
		{
			name: "single-node request for a multi-node volume",
			steps: []step{
				{volume: "v1", node: "n1", mode: rwx},
				{volume: "v1", node: "n2", mode: rwo, want: codes.FailedPrecondition},
			},
			wantPublished: map[string][]string{"v1": {"n1"}},
			wantConflicts: 1,
		},
		{
			name: "multi-node volume on several nodes",
			steps: []step{
				{volume: "v1", node: "n1", mode: rwx},
				{volume: "v1", node: "n2", mode: rwx},
				{volume: "v2", node: "n1", mode: rox, readOnly: true},
				{volume: "v2", node: "n3", mode: rox, readOnly: true},
			},
			wantPublished: map[string][]string{"v1": {"n1", "n2"}, "v2": {"n1", "n3"}},
		},
		{
			name: "move a single-node volume",
			steps: []step{
				{volume: "v1", node: "n1", mode: rwo},
				{unpublish: true, volume: "v1", node: "n1"},
				{volume: "v1", node: "n2", mode: rwo},
			},
			wantPublished: map[string][]string{"v1": {"n2"}},
		},
		{
			name: "unpublish is idempotent",
			steps: []step{
				{volume: "v1", node: "n1", mode: rwo},
				{unpublish: true, volume: "v1", node: "n1"},
				{unpublish: true, volume: "v1", node: "n1"},
				{unpublish: true, volume: "never-published", node: "n1"},
			},
			wantPublished: map[string][]string{},
		},
		{
			name: "unpublish without node unpublishes from all nodes",
			steps: []step{
				{volume: "v1", node: "n1", mode: rwx},
				{volume: "v1", node: "n2", mode: rwx},
				{volume: "v2", node: "n1", mode: rwo},
				{unpublish: true, volume: "v1"},
			},
			wantPublished: map[string][]string{"v2": {"n1"}},
		},
		{
			name: "invalid requests",
			steps: []step{
				{volume: "", node: "n1", mode: rwo, want: codes.InvalidArgument},
				{volume: "v1", node: "", mode: rwo, want: codes.InvalidArgument},
				{volume: "v1", node: "n1", want: codes.InvalidArgument},
				{unpublish: true, volume: "", node: "n1", want: codes.InvalidArgument},
			},
			wantPublished: map[string][]string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, c := startDriver(t)
			ctx := t.Context()
			for i, s := range tt.steps {
				var err error
				if s.unpublish {
					err = unpublish(ctx, c, s.volume, s.node)
				} else {
					var resp *csi.ControllerPublishVolumeResponse
					resp, err = publish(ctx, c, s.volume, s.node, s.mode, s.readOnly)
					if err == nil && resp.GetPublishContext()[DevicePathKey] != "/dev/csi-test/"+s.volume {
						t.Errorf("step %d: publish context %v, want device path of %s", i, resp.GetPublishContext(), s.volume)
					}
				}
				if got := status.Code(err); got != s.want {
					t.Fatalf("step %d (%+v): got %v, want code %v", i, s, err, s.want)
				}
			}
			if got := d.Published(); !reflect.DeepEqual(got, tt.wantPublished) {
				t.Errorf("Published() = %v, want %v", got, tt.wantPublished)
			}
			if got := d.Conflicts(); len(got) != tt.wantConflicts {
				t.Errorf("Conflicts() = %v, want %d", got, tt.wantConflicts)
			}
			if got := len(d.Calls()); got != len(tt.steps) {
				t.Errorf("recorded %d calls, want %d", got, len(tt.steps))
			}
		})
	}
}

func TestConflictRecord(t *testing.T) {
	d, c := startDriver(t)
	ctx := t.Context()
	if _, err := publish(ctx, c, "v1", "n1", rwo, false); err != nil {
		t.Fatal(err)
	}
	if _, err := publish(ctx, c, "v1", "n2", rwo, false); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("publish on second node: got %v, want FailedPrecondition", err)
	}
	got := d.Conflicts()
	if len(got) != 1 || got[0].VolumeID != "v1" || got[0].NodeID != "n2" || !reflect.DeepEqual(got[0].PublishedOn, []string{"n1"}) {
		t.Errorf("Conflicts() = %+v, want v1 on n2 refused while on [n1]", got)
	}
	if got := d.PublishedNodes("v1"); !reflect.DeepEqual(got, []string{"n1"}) {
		t.Errorf("PublishedNodes(v1) = %v, want [n1]", got)
	}
}

func TestFaults(t *testing.T) {
	tests := []struct {
		name  string
		op    Operation
		fault Fault
		calls int
		// want is the code of each call in turn.
		want []codes.Code
	}{
		{
			name:  "publish fails until cleared",
			op:    OpPublish,
			fault: Fault{Code: codes.ResourceExhausted, Message: "too many volumes"},
			want:  []codes.Code{codes.ResourceExhausted, codes.ResourceExhausted, codes.ResourceExhausted},
		},
		{
			name:  "publish fails twice",
			op:    OpPublish,
			fault: Fault{Code: codes.Internal, Message: "boom", Count: 2},
			want:  []codes.Code{codes.Internal, codes.Internal, codes.OK},
		},
		{
			name:  "unpublish fails once",
			op:    OpUnpublish,
			fault: Fault{Code: codes.Unavailable, Message: "backend down", Count: 1},
			want:  []codes.Code{codes.Unavailable, codes.OK, codes.OK},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, c := startDriver(t)
			ctx := t.Context()
			if err := d.SetFault(tt.op, "v1", tt.fault); err != nil {
				t.Fatal(err)
			}
			for i, want := range tt.want {
				var err error
				if tt.op == OpPublish {
					_, err = publish(ctx, c, "v1", "n1", rwo, false)
				} else {
					err = unpublish(ctx, c, "v1", "n1")
				}
				if got := status.Code(err); got != want {
					t.Fatalf("call %d: got %v, want %v", i, err, want)
				}
				if err != nil && status.Convert(err).Message() != tt.fault.Message {
					t.Errorf("call %d: message %q, want %q", i, status.Convert(err).Message(), tt.fault.Message)
				}
			}
			if _, err := publish(ctx, c, "other", "n1", rwo, false); err != nil {
				t.Errorf("fault on v1 affected another volume: %v", err)
			}
			d.ClearFault(tt.op, "v1")
			if _, err := publish(ctx, c, "v1", "n1", rwo, false); err != nil {
				t.Errorf("publish after ClearFault: %v", err)
			}
			calls := d.CallsFor(tt.op, "v1")
			if len(calls) < len(tt.want) || calls[0].Code != tt.want[0] || calls[0].NodeID != "n1" {
				t.Errorf("CallsFor(%s, v1) = %+v, want the calls made", tt.op, calls)
			}
		})
	}
}

func TestSetFaultRejects(t *testing.T) {
	d := New(testDriverName)
	tests := []struct {
		name  string
		op    Operation
		fault Fault
	}{
		{name: "code OK", op: OpPublish, fault: Fault{Code: codes.OK}},
		{name: "unknown operation", op: "CreateVolume", fault: Fault{Code: codes.Internal}},
		{name: "negative count", op: OpPublish, fault: Fault{Code: codes.Internal, Count: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := d.SetFault(tt.op, "v1", tt.fault); err == nil {
				t.Error("SetFault succeeded, want an error")
			}
		})
	}
}

func TestDelay(t *testing.T) {
	d, c := startDriver(t)
	const delay = 300 * time.Millisecond
	d.SetDelay(delay)

	start := time.Now()
	if _, err := publish(t.Context(), c, "v1", "n1", rwo, false); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < delay {
		t.Errorf("publish took %v, want at least %v", took, delay)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := unpublish(ctx, c, "v1", "n1"); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("unpublish with a short deadline: got %v, want DeadlineExceeded", err)
	}
	if got := d.PublishedNodes("v1"); !reflect.DeepEqual(got, []string{"n1"}) {
		t.Errorf("timed-out unpublish changed the state: PublishedNodes = %v", got)
	}

	d.SetDelay(0)
	if err := unpublish(t.Context(), c, "v1", "n1"); err != nil {
		t.Fatal(err)
	}
	if got := d.PublishedNodes("v1"); len(got) != 0 {
		t.Errorf("PublishedNodes after unpublish = %v, want none", got)
	}
}

func TestSocketPath(t *testing.T) {
	tests := []struct {
		endpoint string
		want     string
		wantErr  bool
	}{
		{endpoint: "unix:///run/csi/socket", want: "/run/csi/socket"},
		{endpoint: "/run/csi/socket", want: "/run/csi/socket"},
		{endpoint: "unix://relative/socket", wantErr: true},
		{endpoint: "tcp://127.0.0.1:10000", wantErr: true},
		{endpoint: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.endpoint, func(t *testing.T) {
			got, err := SocketPath(tt.endpoint)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("SocketPath(%q) = %q, %v; want %q, error %t", tt.endpoint, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestServeReplacesStaleSocketAndStopRemovesIt(t *testing.T) {
	dir, err := os.MkdirTemp("", "csidriver")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "csi.sock")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	srv, err := Serve(ctx, New(testDriverName), path)
	if err != nil {
		t.Fatalf("Serve over a stale socket file: %v", err)
	}
	srv.Stop()
	if err := srv.Err(); err != nil {
		t.Errorf("Err after Stop = %v, want nil", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("socket still there after Stop: %v", err)
	}
}
