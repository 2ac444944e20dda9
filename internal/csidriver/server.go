package csidriver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// gracePeriod is how long Stop lets running calls finish before cutting them off.
const gracePeriod = 5 * time.Second

// SocketPath returns the file system path of a CSI endpoint given as
// "unix:///path/to/socket" or as a plain absolute path.
func SocketPath(endpoint string) (string, error) {
	path, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok {
		path = endpoint
	}
	if !strings.HasPrefix(path, "/") {
		return "", fmt.Errorf("endpoint %q: want unix:///absolute/path or /absolute/path", endpoint)
	}
	return path, nil
}

// Server serves a Driver on a unix socket.
type Server struct {
	path string
	grpc *grpc.Server
	done chan struct{}
	err  error
}

// Serve listens on the unix socket of endpoint, replacing a stale socket file, and
// serves d's Identity and Controller services there in the background until Stop.
// ctx carries the logger of the calls.
func Serve(ctx context.Context, d *Driver, endpoint string) (*Server, error) {
	logger := klog.FromContext(ctx).WithValues("driver", d.Name())
	return serve(logger, endpoint, "CSI driver", d.Register)
}

// serve listens on the unix socket of endpoint, replacing a stale socket file, and
// serves the gRPC services register adds, logging every call, until Stop. what says
// what is served, in logs and errors.
func serve(logger klog.Logger, endpoint, what string, register func(*grpc.Server)) (*Server, error) {
	path, err := SocketPath(endpoint)
	if err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	logger = logger.WithValues("endpoint", path)
	s := &Server{
		path: path,
		grpc: grpc.NewServer(grpc.ChainUnaryInterceptor(logCalls(logger))),
		done: make(chan struct{}),
	}
	register(s.grpc)
	go func() {
		defer close(s.done)
		if err := s.grpc.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.err = fmt.Errorf("serve %s on %s: %w", what, path, err)
		}
	}()
	logger.Info("Serving " + what)
	return s, nil
}

// Path is the file system path of the socket.
func (s *Server) Path() string { return s.path }

// Endpoint is the socket as a unix:// URL, the form CSI sidecars take.
func (s *Server) Endpoint() string { return "unix://" + s.path }

// Done is closed when the server has stopped serving.
func (s *Server) Done() <-chan struct{} { return s.done }

// Err returns why serving ended, after Done is closed; nil after a Stop.
func (s *Server) Err() error {
	<-s.done
	return s.err
}

// Stop lets running calls finish for a short while, then stops serving; closing the
// listener removes the socket file.
func (s *Server) Stop() {
	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(gracePeriod):
		s.grpc.Stop()
	}
	<-s.done
}

func logCalls(logger klog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(klog.NewContext(ctx, logger), req)
		logger.V(2).Info("CSI call", "method", info.FullMethod, "code", status.Code(err), "err", err, "duration", time.Since(start))
		return resp, err
	}
}
