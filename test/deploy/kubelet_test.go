package deploy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
)

// fakeKubelet stands in for a node's kubelet and container runtime in the one
// thing explain --from-leader needs of them: the API server's port-forward to
// a pod on the node. It serves /portForward/NAMESPACE/POD with the kubelet's own
// streaming code (k8s.io/cri-streaming), and connects each forwarded port to
// the address of the process that stands for the pod, as the runtime connects
// to the port inside the pod's network namespace.
type fakeKubelet struct {
	// node is the Node whose kubelet it is.
	node string
	// namespace and pod name the one pod it forwards to; ports maps that pod's
	// ports to the addresses they reach.
	namespace, pod string
	ports          map[int32]string
	// forwarded counts the connections forwarded.
	forwarded atomic.Int32
}

// The kubelet's defaults for a port-forward's idle connection and for the
// creation of its streams.
const (
	portForwardIdleTimeout    = 4 * time.Hour
	portForwardStreamCreation = 30 * time.Second
)

// startFakeKubelet serves a kubelet's port-forward for the pod on a loopback
// port, registers a Node whose kubelet it is, and removes both when the test
// ends.
func startFakeKubelet(t *testing.T, node, namespace, pod string, ports map[int32]string) *fakeKubelet {
	t.Helper()
	k := &fakeKubelet{node: node, namespace: namespace, pod: pod, ports: ports}
	mux := http.NewServeMux()
	mux.HandleFunc("/portForward/{namespace}/{pod}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("namespace") != k.namespace || r.PathValue("pod") != k.pod {
			http.Error(w, "no such pod on this node", http.StatusNotFound)
			return
		}
		portforward.ServePortForward(w, r, k, k.pod, "", nil, portForwardIdleTimeout, portForwardStreamCreation, portforward.SupportedProtocols)
	})
	// The API server checks no kubelet certificate unless given
	// --kubelet-certificate-authority, which the suite's is not.
	server := httptest.NewTLSServer(mux)
	t.Cleanup(server.Close)
	_, port, err := net.SplitHostPort(server.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	kubeletPort, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	registerNode(t, node, int32(kubeletPort))
	return k
}

// PortForward connects the stream to the address the pod's port reaches, until
// either side closes.
func (k *fakeKubelet) PortForward(ctx context.Context, pod, _ string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	addr, ok := k.ports[port]
	if !ok {
		return fmt.Errorf("pod %s listens on no port %d", pod, port)
	}
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("connecting to port %d of pod %s: %w", port, pod, err)
	}
	defer conn.Close()
	k.forwarded.Add(1)
	// Either side may end the connection first: the copy that stops then ends
	// the other, and neither end is an error of the forward.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(conn, stream)
		_ = conn.Close()
	}()
	_, _ = io.Copy(stream, conn)
	_ = stream.Close()
	wg.Wait()
	return nil
}

// registerNode creates a Node whose kubelet listens on the loopback port, as a
// kubelet registers itself and reports its port, and deletes it when the test
// ends.
func registerNode(t *testing.T, name string, kubeletPort int32) {
	t.Helper()
	node, err := env.Client.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("registering node %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := env.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting node %s: %v", name, err)
		}
	})
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = kubeletPort
	if _, err := env.Client.CoreV1().Nodes().UpdateStatus(t.Context(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("reporting the kubelet port of node %s: %v", name, err)
	}
}
