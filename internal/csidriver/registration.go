package csidriver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// maxSocketPath is the longest path a unix socket can have on Linux.
const maxSocketPath = 107

// cspVersion is the CSI version the node plugin tells kubelet it supports.
const cspVersion = "1.0.0"

// NodePlugin is the driver's plugin on one node: the Identity and Node services on a
// CSI socket of its own, and the registration socket kubelet's plugin watcher finds
// in the node's plugin registration directory, answered as node-driver-registrar
// answers it. It serves through kubelet restarts: a new kubelet finds the
// registration socket again and registers the driver anew.
type NodePlugin struct {
	csi      *Server
	registry *Server

	mu sync.Mutex
	// registrations counts kubelet's successful registrations; lastError is the
	// error of the last failed one.
	registrations int
	lastError     string
}

// ServeNode serves d's node plugin for the node whose driver node ID is nodeID: the
// CSI socket at csiEndpoint and the registration socket <registryDir>/<driver>-reg.sock,
// where registryDir is kubelet's <root-dir>/plugins_registry. It serves until Stop.
func ServeNode(ctx context.Context, d *Driver, nodeID, csiEndpoint, registryDir string) (*NodePlugin, error) {
	logger := klog.FromContext(ctx).WithValues("driver", d.Name(), "nodeID", nodeID)
	regPath := filepath.Join(registryDir, d.Name()+"-reg.sock")
	csiPath, err := SocketPath(csiEndpoint)
	if err != nil {
		return nil, err
	}
	for _, path := range []string{regPath, csiPath} {
		if len(path) > maxSocketPath {
			return nil, fmt.Errorf("socket path %s is longer than %d bytes", path, maxSocketPath)
		}
	}
	p := &NodePlugin{}
	p.csi, err = serve(logger, csiPath, "CSI node plugin", func(s *grpc.Server) {
		csi.RegisterIdentityServer(s, &identityServer{driver: d})
		csi.RegisterNodeServer(s, &nodeServer{driver: d, nodeID: nodeID})
	})
	if err != nil {
		return nil, err
	}
	p.registry, err = serve(logger, regPath, "CSI plugin registration", func(s *grpc.Server) {
		registerapi.RegisterRegistrationServer(s, &registrationServer{driver: d.Name(), endpoint: csiPath, plugin: p, logger: logger})
	})
	if err != nil {
		p.csi.Stop()
		return nil, err
	}
	return p, nil
}

// Registrations returns how many times kubelet registered the plugin successfully,
// and the error of the last failed registration ("" if none failed).
func (p *NodePlugin) Registrations() (int, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.registrations, p.lastError
}

// Stop stops both sockets.
func (p *NodePlugin) Stop() {
	p.registry.Stop()
	p.csi.Stop()
}

// registrationServer answers kubelet's plugin watcher as node-driver-registrar does.
type registrationServer struct {
	registerapi.UnimplementedRegistrationServer
	driver, endpoint string
	plugin           *NodePlugin
	logger           klog.Logger
}

func (s *registrationServer) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              s.driver,
		Endpoint:          s.endpoint,
		SupportedVersions: []string{cspVersion},
	}, nil
}

func (s *registrationServer) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	s.plugin.mu.Lock()
	defer s.plugin.mu.Unlock()
	if !st.PluginRegistered {
		s.plugin.lastError = st.Error
		s.logger.Error(errors.New(st.Error), "kubelet failed to register the CSI driver")
		return &registerapi.RegistrationStatusResponse{}, nil
	}
	s.plugin.registrations++
	s.logger.Info("kubelet registered the CSI driver")
	return &registerapi.RegistrationStatusResponse{}, nil
}
