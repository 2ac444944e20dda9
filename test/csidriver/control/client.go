package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/test/csidriver"
)

// Client talks to a Server.
type Client struct {
	base string
	http *http.Client
}

// NewClient returns a client of the server at address, given as Serve takes it.
func NewClient(address string) *Client {
	transport := &http.Transport{}
	base := "http://" + address
	if path, ok := strings.CutPrefix(address, "unix://"); ok {
		base = "http://csi-test-driver"
		transport.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
	}
	return &Client{base: base, http: &http.Client{Transport: transport, Timeout: 30 * time.Second}}
}

// SetFault makes calls of op on volumeID fail with f.
func (c *Client) SetFault(ctx context.Context, op csidriver.Operation, volumeID string, f csidriver.Fault) error {
	return c.do(ctx, http.MethodPut, "/fault", FaultRequest{Operation: op, VolumeID: volumeID, Fault: f}, nil)
}

// ClearFault removes the fault of op on volumeID.
func (c *Client) ClearFault(ctx context.Context, op csidriver.Operation, volumeID string) error {
	q := url.Values{"operation": {string(op)}, "volumeID": {volumeID}}
	return c.do(ctx, http.MethodDelete, "/fault?"+q.Encode(), nil, nil)
}

// ClearFaults removes all faults.
func (c *Client) ClearFaults(ctx context.Context) error {
	return c.do(ctx, http.MethodDelete, "/faults", nil, nil)
}

// SetDelay sets the delay of every publish and unpublish call.
func (c *Client) SetDelay(ctx context.Context, delay time.Duration) error {
	return c.do(ctx, http.MethodPut, "/delay", DelayRequest{Delay: delay.String()}, nil)
}

// Published returns, for every published volume, the sorted IDs of its nodes.
func (c *Client) Published(ctx context.Context) (map[string][]string, error) {
	var out map[string][]string
	return out, c.do(ctx, http.MethodGet, "/published", nil, &out)
}

// Calls returns the recorded publish and unpublish calls, oldest first.
func (c *Client) Calls(ctx context.Context) ([]csidriver.Call, error) {
	var out []csidriver.Call
	return out, c.do(ctx, http.MethodGet, "/calls", nil, &out)
}

// Conflicts returns the refused attempts to publish a single-node volume on a second node.
func (c *Client) Conflicts(ctx context.Context) ([]csidriver.Conflict, error) {
	var out []csidriver.Conflict
	return out, c.do(ctx, http.MethodGet, "/conflicts", nil, &out)
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s %s: encode request: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(msg)))
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode response: %w", method, path, err)
	}
	return nil
}
