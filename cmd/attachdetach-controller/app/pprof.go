package app

import (
	"net/http"
	"net/http/pprof"
)

// servePprof adds Go's profiles under /debug/pprof/ (--enable-pprof). The
// handlers are added to mux alone: importing net/http/pprof also registers them
// on http.DefaultServeMux, which the controller never serves.
func servePprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
