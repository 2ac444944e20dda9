package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Profiles taken of this controller with -profile, in the run's directory: the
// CPU profile from the start of the attach phase, and the heap after the idle
// period (`go tool pprof -top <file>` reads either).
const (
	cpuProfileFile  = "cpu-attach.pprof"
	heapProfileFile = "heap-steady.pprof"
)

// freeAddress returns a loopback address no one listens on now, for the
// controller's HTTP endpoint.
func freeAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port for the controller's HTTP endpoint: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// profiler fetches Go profiles from a controller's /debug/pprof/ endpoints.
type profiler struct {
	// addr is the controller's --http-endpoint; dir receives the profiles.
	addr, dir string
}

// startCPU starts a CPU profile of length d and returns a function that waits
// for it and writes it to file.
func (p profiler) startCPU(ctx context.Context, file string, d time.Duration) (wait func() error) {
	done := make(chan error, 1)
	go func() {
		done <- p.fetch(ctx, "profile?seconds="+strconv.Itoa(int(d.Seconds())), file, d)
	}()
	return func() error { return <-done }
}

// heap writes the in-use heap, after a garbage collection, to file.
func (p profiler) heap(ctx context.Context, file string) error {
	return p.fetch(ctx, "heap?gc=1", file, 0)
}

// fetch writes /debug/pprof/<path> to file; the request may take d, and a minute
// more.
func (p profiler) fetch(ctx context.Context, path, file string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d+time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+"/debug/pprof/"+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("fetching profile %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetching profile %s: %s", path, resp.Status)
	}
	f, err := os.Create(filepath.Join(p.dir, file))
	if err != nil {
		return fmt.Errorf("writing profile: %w", err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("writing profile %s: %w", file, err)
	}
	return f.Close()
}
