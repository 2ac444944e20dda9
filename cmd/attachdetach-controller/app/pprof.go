package app

import (
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"strings"

	"k8s.io/component-base/logs"
	"k8s.io/klog/v2"
)

// verbosityPath takes a new -v for the running process (--enable-pprof): PUT the
// level as the body, as on kube-controller-manager.
const verbosityPath = "/debug/flags/v"

// servePprof adds Go's profiles under /debug/pprof/ and the verbosity setter at
// verbosityPath (--enable-pprof). The handlers are added to mux alone:
// importing net/http/pprof also registers them on http.DefaultServeMux, which
// the controller never serves.
func servePprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("PUT "+verbosityPath, verbosityHandler(logs.GlogSetter))
}

// verbosityHandler sets the log verbosity to the level in the request's body
// with set, which returns what it did.
func verbosityHandler(set func(level string) (string, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 64))
		if err != nil {
			http.Error(w, "reading the verbosity: "+err.Error(), http.StatusBadRequest)
			return
		}
		level := strings.TrimSpace(string(body))
		done, err := set(level)
		if err != nil {
			http.Error(w, fmt.Sprintf("setting -v to %q: %v", level, err), http.StatusBadRequest)
			return
		}
		klog.FromContext(r.Context()).Info("Log verbosity changed", "verbosity", level, "from", r.RemoteAddr)
		_, _ = fmt.Fprintln(w, done)
	})
}
