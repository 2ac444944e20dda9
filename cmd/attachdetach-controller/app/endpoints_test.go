package app

import (
	"net/http"
	"net/http/httptest"
	"testing"

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
			e := httpEndpoints{metrics: metrics.New(), ready: func() bool { return true }, explainer: http.NotFoundHandler(), pprof: tc.pprof}
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
