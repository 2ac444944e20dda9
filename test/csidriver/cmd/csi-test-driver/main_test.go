package main

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

	"github.com/attachdetach-controller/attachdetach-controller/test/csidriver"
	"github.com/attachdetach-controller/attachdetach-controller/test/csidriver/control"
)

func TestRun(t *testing.T) {
	dir, err := os.MkdirTemp("", "csitestdriver")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	socket := filepath.Join(dir, "csi.sock")
	controlAddress := "unix://" + filepath.Join(dir, "control.sock")

	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(ctx, "unix://"+socket, "run.csi.example.com", controlAddress, 0) }()

	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	identity := csi.NewIdentityClient(conn)
	info, err := identity.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("GetPluginInfo: %v", err)
	}
	if info.GetName() != "run.csi.example.com" {
		t.Errorf("driver name %q, want run.csi.example.com", info.GetName())
	}

	ctl := control.NewClient(controlAddress)
	if err := ctl.SetFault(ctx, csidriver.OpPublish, "v1", csidriver.Fault{Code: codes.Aborted, Message: "pending"}); err != nil {
		t.Fatalf("SetFault through the control API: %v", err)
	}
	req := &csi.ControllerPublishVolumeRequest{
		VolumeId: "v1",
		NodeId:   "n1",
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		},
	}
	controller := csi.NewControllerClient(conn)
	if _, err := controller.ControllerPublishVolume(ctx, req); status.Code(err) != codes.Aborted {
		t.Fatalf("publish: got %v, want the injected Aborted", err)
	}
	if err := ctl.ClearFaults(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := controller.ControllerPublishVolume(ctx, req); err != nil {
		t.Fatalf("publish: %v", err)
	}
	published, err := ctl.Published(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string][]string{"v1": {"n1"}}; !reflect.DeepEqual(published, want) {
		t.Errorf("published %v, want %v", published, want)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run returned %v after cancel, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	if _, err := os.Stat(socket); !os.IsNotExist(err) {
		t.Errorf("CSI socket left behind: %v", err)
	}
}
