package control

import (
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2/ktesting"

	"github.com/attachdetach-controller/attachdetach-controller/test/csidriver"
)

func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "csicontrol")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// startDriver serves a driver over gRPC and its control API at controlAddress.
func startDriver(t *testing.T, controlAddress string) (csi.ControllerClient, *Client) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	d := csidriver.New("test.csi.example.com")
	srv, err := csidriver.Serve(ctx, d, filepath.Join(shortTempDir(t), "csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	ctl, err := Serve(ctx, d, controlAddress)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctl.Stop)
	conn, err := grpc.NewClient(srv.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return csi.NewControllerClient(conn), NewClient(ctl.Address())
}

func publishRequest(volumeID, nodeID string) *csi.ControllerPublishVolumeRequest {
	return &csi.ControllerPublishVolumeRequest{
		VolumeId: volumeID,
		NodeId:   nodeID,
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		},
	}
}

func TestClientSteersDriver(t *testing.T) {
	tests := []struct {
		name    string
		address func(t *testing.T) string
	}{
		{name: "tcp loopback", address: func(*testing.T) string { return "127.0.0.1:0" }},
		{name: "unix socket", address: func(t *testing.T) string { return "unix://" + filepath.Join(shortTempDir(t), "control.sock") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			driver, client := startDriver(t, tt.address(t))
			ctx := t.Context()

			fault := csidriver.Fault{Code: codes.ResourceExhausted, Message: "no more slots"}
			if err := client.SetFault(ctx, csidriver.OpPublish, "v1", fault); err != nil {
				t.Fatalf("SetFault: %v", err)
			}
			_, err := driver.ControllerPublishVolume(ctx, publishRequest("v1", "n1"))
			if st := status.Convert(err); st.Code() != fault.Code || st.Message() != fault.Message {
				t.Fatalf("publish with fault: got %v, want %v %q", err, fault.Code, fault.Message)
			}
			if err := client.ClearFault(ctx, csidriver.OpPublish, "v1"); err != nil {
				t.Fatalf("ClearFault: %v", err)
			}
			if _, err := driver.ControllerPublishVolume(ctx, publishRequest("v1", "n1")); err != nil {
				t.Fatalf("publish after ClearFault: %v", err)
			}
			if _, err := driver.ControllerPublishVolume(ctx, publishRequest("v1", "n2")); status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("publish on a second node: got %v, want FailedPrecondition", err)
			}

			published, err := client.Published(ctx)
			if err != nil {
				t.Fatalf("Published: %v", err)
			}
			if want := map[string][]string{"v1": {"n1"}}; !reflect.DeepEqual(published, want) {
				t.Errorf("Published = %v, want %v", published, want)
			}
			calls, err := client.Calls(ctx)
			if err != nil {
				t.Fatalf("Calls: %v", err)
			}
			wantCodes := []codes.Code{codes.ResourceExhausted, codes.OK, codes.FailedPrecondition}
			if len(calls) != len(wantCodes) {
				t.Fatalf("Calls = %+v, want %d calls", calls, len(wantCodes))
			}
			for i, c := range calls {
				if c.Operation != csidriver.OpPublish || c.VolumeID != "v1" || c.Code != wantCodes[i] {
					t.Errorf("call %d = %+v, want publish of v1 with %v", i, c, wantCodes[i])
				}
			}
			conflicts, err := client.Conflicts(ctx)
			if err != nil {
				t.Fatalf("Conflicts: %v", err)
			}
			if len(conflicts) != 1 || conflicts[0].NodeID != "n2" {
				t.Errorf("Conflicts = %+v, want one for n2", conflicts)
			}

			if err := client.SetFault(ctx, csidriver.OpUnpublish, "v1", csidriver.Fault{Code: codes.Internal, Message: "x"}); err != nil {
				t.Fatal(err)
			}
			if err := client.ClearFaults(ctx); err != nil {
				t.Fatalf("ClearFaults: %v", err)
			}
			if err := client.SetDelay(ctx, 200*time.Millisecond); err != nil {
				t.Fatalf("SetDelay: %v", err)
			}
			start := time.Now()
			if _, err := driver.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: "v1", NodeId: "n1"}); err != nil {
				t.Fatalf("unpublish after ClearFaults: %v", err)
			}
			if took := time.Since(start); took < 200*time.Millisecond {
				t.Errorf("unpublish took %v, want the 200ms delay", took)
			}
		})
	}
}

func TestBadRequests(t *testing.T) {
	_, client := startDriver(t, "127.0.0.1:0")
	tests := []struct {
		name string
		body string
		path string
	}{
		{name: "unknown operation", path: "/fault", body: `{"operation":"CreateVolume","volumeID":"v1","code":"INTERNAL"}`},
		{name: "code OK", path: "/fault", body: `{"operation":"ControllerPublishVolume","volumeID":"v1","code":"OK"}`},
		{name: "unknown field", path: "/fault", body: `{"operation":"ControllerPublishVolume","volume":"v1","code":13}`},
		{name: "bad delay", path: "/delay", body: `{"delay":"soon"}`},
		{name: "negative delay", path: "/delay", body: `{"delay":"-1s"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, client.base+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.http.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("status %s, want 400", resp.Status)
			}
		})
	}
}

func TestServeRefusesNonLoopback(t *testing.T) {
	tests := []string{"0.0.0.0:0", ":0", "192.0.2.1:8080", "example.com:80", "no-port"}
	for _, address := range tests {
		t.Run(address, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			s, err := Serve(ctx, csidriver.New("x"), address)
			if err == nil {
				s.Stop()
				t.Fatalf("Serve(%q) succeeded, want an error", address)
			}
		})
	}
}
