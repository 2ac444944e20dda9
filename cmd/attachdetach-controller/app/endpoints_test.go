package app

import (
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
)

func TestPprofOnlyWhenEnabled(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pprof bool
		want  int
	}{
		{name: "off by default", pprof: false, want: http.StatusNotFound},
		{name: "on with --enable-pprof", pprof: true, want: http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := httpEndpoints{metrics: metrics.New(), ready: func() (bool, string) { return true, "" }, explainer: http.NotFoundHandler(), pprof: tc.pprof}
			srv := httptest.NewServer(e.handler())
			defer srv.Close()
			for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/cmdline"} {
				resp, err := http.Get(srv.URL + path)
				if err != nil {
					t.Fatal(err)
				}
				_ = resp.Body.Close()
				if resp.StatusCode != tc.want {
					t.Errorf("GET %s = %d, want %d", path, resp.StatusCode, tc.want)
				}
			}
			if got := request(t, http.MethodPut, srv.URL+verbosityPath, "0"); got != tc.want {
				t.Errorf("PUT %s = %d, want %d", verbosityPath, got, tc.want)
			}
			resp, err := http.Get(srv.URL + "/healthz")
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("GET /healthz = %d, want 200", resp.StatusCode)
			}
		})
	}
}

// TestVerbosityChangesAtRunTime: with --enable-pprof, PUT /debug/flags/v sets
// klog's verbosity; anything but a level, or any other method, changes nothing.
func TestVerbosityChangesAtRunTime(t *testing.T) {
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	before := klogFlags.Lookup("v").Value.String()
	t.Cleanup(func() { _ = klogFlags.Set("v", before) })
	if err := klogFlags.Set("v", "1"); err != nil {
		t.Fatal(err)
	}
	e := httpEndpoints{metrics: metrics.New(), ready: func() (bool, string) { return true, "" }, explainer: http.NotFoundHandler(), pprof: true}
	srv := httptest.NewServer(e.handler())
	defer srv.Close()

	for _, tc := range []struct {
		name   string
		method string
		body   string
		want   int
		wantV  string
	}{
		{name: "a level", method: http.MethodPut, body: "5\n", want: http.StatusOK, wantV: "5"},
		{name: "not a number", method: http.MethodPut, body: "debug", want: http.StatusBadRequest, wantV: "5"},
		{name: "negative", method: http.MethodPut, body: "-1", want: http.StatusBadRequest, wantV: "5"},
		{name: "a GET", method: http.MethodGet, want: http.StatusMethodNotAllowed, wantV: "5"},
		{name: "a POST", method: http.MethodPost, body: "2", want: http.StatusMethodNotAllowed, wantV: "5"},
		{name: "back down", method: http.MethodPut, body: "2", want: http.StatusOK, wantV: "2"},
	} {
		if got := request(t, tc.method, srv.URL+verbosityPath, tc.body); got != tc.want {
			t.Errorf("%s: %s %q = %d, want %d", tc.name, tc.method, tc.body, got, tc.want)
		}
		if v := klogFlags.Lookup("v").Value.String(); v != tc.wantV {
			t.Errorf("%s: -v is %s, want %s", tc.name, v, tc.wantV)
		}
	}
}

// request sends a request and returns the status code of the answer.
func request(t *testing.T, method, url, body string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestReadyzTellsWhetherTheReplicaCanLeadFromMemory: a standby is ready once its
// informers have synced, so that a rolling update hands the Lease to a replica
// with full caches; a leader once it has rebuilt its state.
func TestReadyzTellsWhetherTheReplicaCanLeadFromMemory(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		leading, rebuilt, synced bool
		want                     int
		wantBody                 string
	}{
		{name: "standby, informers syncing", want: http.StatusServiceUnavailable, wantBody: "standing by, informers not synced yet"},
		{name: "standby, informers synced", synced: true, want: http.StatusOK, wantBody: "ok"},
		{name: "leader rebuilding", leading: true, synced: true, want: http.StatusServiceUnavailable, wantBody: "leading, state not rebuilt yet"},
		{name: "leader rebuilt", leading: true, rebuilt: true, synced: true, want: http.StatusOK, wantBody: "ok"},
		{name: "leader rebuilt before its standby informers synced", leading: true, rebuilt: true, want: http.StatusOK, wantBody: "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r readiness
			r.leading.Store(tc.leading)
			r.rebuilt.Store(tc.rebuilt)
			r.synced.Store(tc.synced)
			srv := httptest.NewServer(httpEndpoints{metrics: metrics.New(), ready: r.state, explainer: http.NotFoundHandler()}.handler())
			defer srv.Close()
			resp, err := http.Get(srv.URL + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.want || strings.TrimSpace(string(body)) != tc.wantBody {
				t.Errorf("GET /readyz = %d %q, want %d %q", resp.StatusCode, body, tc.want, tc.wantBody)
			}
		})
	}
}
