// Package control steers a csidriver.Driver running in another process over HTTP:
// inject and clear faults, set a delay, and read which volumes are published where.
// It listens on a loopback address or a unix socket only, since it has no
// authentication.
//
//	PUT    /fault      {"operation":"ControllerPublishVolume","volumeID":"v1","code":"INTERNAL","message":"boom","count":0}
//	DELETE /fault?operation=ControllerPublishVolume&volumeID=v1
//	DELETE /faults
//	PUT    /delay      {"delay":"2s"}
//	GET    /published  {"v1":["node-1"]}
//	GET    /calls      [{"operation":...,"volumeID":...,"nodeID":...,"code":0,"time":...}]
//	GET    /conflicts  [{"volumeID":...,"nodeID":...,"publishedOn":[...],"time":...}]
package control

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/test/csidriver"
)

// FaultRequest is the body of PUT /fault.
type FaultRequest struct {
	Operation csidriver.Operation `json:"operation"`
	VolumeID  string              `json:"volumeID"`
	csidriver.Fault
}

// DelayRequest is the body of PUT /delay; Delay is a Go duration such as "1.5s".
type DelayRequest struct {
	Delay string `json:"delay"`
}

// maxBody bounds request bodies; every request is a small JSON object.
const maxBody = 64 << 10

// Handler serves the control API of d.
func Handler(d *csidriver.Driver) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /fault", func(w http.ResponseWriter, r *http.Request) {
		var req FaultRequest
		if !decode(w, r, &req) {
			return
		}
		if err := d.SetFault(req.Operation, req.VolumeID, req.Fault); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("DELETE /fault", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		d.ClearFault(csidriver.Operation(q.Get("operation")), q.Get("volumeID"))
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("DELETE /faults", func(w http.ResponseWriter, _ *http.Request) {
		d.ClearFaults()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("PUT /delay", func(w http.ResponseWriter, r *http.Request) {
		var req DelayRequest
		if !decode(w, r, &req) {
			return
		}
		delay, err := time.ParseDuration(req.Delay)
		if err != nil || delay < 0 {
			http.Error(w, fmt.Sprintf("delay %q: want a non-negative duration", req.Delay), http.StatusBadRequest)
			return
		}
		d.SetDelay(delay)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /published", func(w http.ResponseWriter, _ *http.Request) { encode(w, d.Published()) })
	mux.HandleFunc("GET /calls", func(w http.ResponseWriter, _ *http.Request) { encode(w, d.Calls()) })
	mux.HandleFunc("GET /conflicts", func(w http.ResponseWriter, _ *http.Request) { encode(w, d.Conflicts()) })
	return mux
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		http.Error(w, fmt.Sprintf("decode request: %v", err), http.StatusBadRequest)
		return false
	}
	return true
}

func encode(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		http.Error(w, fmt.Sprintf("encode response: %v", err), http.StatusInternalServerError)
	}
}
