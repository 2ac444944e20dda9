package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/test/csidriver"
)

// Server serves the control API on a loopback address or a unix socket.
type Server struct {
	addr string
	http *http.Server
	done chan struct{}
	err  error
}

// Serve serves the control API of d in the background until Stop. address is either
// "unix:///path/to/socket" or host:port with a loopback host ("127.0.0.1:0" picks a
// free port; Address tells which).
func Serve(ctx context.Context, d *csidriver.Driver, address string) (*Server, error) {
	lis, err := listen(address)
	if err != nil {
		return nil, err
	}
	s := &Server{
		addr: lis.Addr().String(),
		http: &http.Server{Handler: Handler(d), ReadHeaderTimeout: 10 * time.Second},
		done: make(chan struct{}),
	}
	if lis.Addr().Network() == "unix" {
		s.addr = "unix://" + s.addr
	}
	go func() {
		defer close(s.done)
		if err := s.http.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.err = fmt.Errorf("serve control API on %s: %w", s.addr, err)
		}
	}()
	klog.FromContext(ctx).Info("Serving control API", "address", s.addr)
	return s, nil
}

// Address is where the server listens, in the form NewClient takes.
func (s *Server) Address() string { return s.addr }

// Done is closed when the server has stopped serving.
func (s *Server) Done() <-chan struct{} { return s.done }

// Err returns why serving ended, after Done is closed; nil after a Stop.
func (s *Server) Err() error {
	<-s.done
	return s.err
}

// Stop stops serving; running requests get a few seconds to finish.
func (s *Server) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.http.Shutdown(ctx); err != nil {
		_ = s.http.Close()
	}
	<-s.done
}

func listen(address string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(address, "unix://"); ok {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
		}
		lis, err := net.Listen("unix", path)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w", path, err)
		}
		return lis, nil
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("control address %q: %w", address, err)
	}
	if !isLoopback(host) {
		return nil, fmt.Errorf("control address %q: host must be a loopback address", address)
	}
	lis, err := net.Listen("tcp", address)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", address, err)
	}
	return lis, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
