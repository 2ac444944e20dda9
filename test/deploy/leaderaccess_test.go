package deploy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

// leaderPort is the port of the Deployment's --http-endpoint, which explain
// --from-leader forwards to by default.
const leaderPort = 8080

// servingAddress is the log line with the address a replica's endpoint listens on.
const servingAddress = `"Serving probes and metrics" address="([^"]+)"`

// TestExplainFromLeaderThroughPortForward runs explain --from-leader as deployed
// and as an operator who is no admin runs it: explain reads the Lease, and asks
// the pod it names through the API server's port-forward (pods/portforward),
// which carries the operator's own credentials to the leader's endpoint. The
// leader authenticates them and has the API server authorize them. It works
// for a ServiceAccount token and for a client certificate of the cluster's
// client CA, each with the explain-reader roles bound and nothing else. A fake
// kubelet serves the node's end of the port-forward, with the kubelet's code,
// and connects it to the replica.
func TestExplainFromLeaderThroughPortForward(t *testing.T) {
	installManifests(t)
	if _, _, err := kubectl(t.Context(), "apply", "-k", overlayWithComponent(t, explainComponent)); err != nil {
		t.Fatal(err)
	}
	r := startReplica(t, "leader", replicaOptions{account: controllerAccount, lease: defaultLease})
	waitLeader(t, defaultLease, r, operationTimeout)
	pod := leaderPodName(t, defaultLease)
	kubelet := startFakeKubelet(t, "portforward-node", controllerNamespace, pod, map[int32]string{leaderPort: r.waitLog(servingAddress)})
	createLeaderPod(t, pod, kubelet.node, "")

	w := suite.NewSimWorld(t, env.Env, suite.SimOptions{Nodes: 1})
	v := w.CreateVolume("data", workload.VolumeOptions{})
	w.CreatePod("app", w.Nodes[0], v.Claim)
	waitAttachedOnlyTo(w, v, w.Nodes[0], operationTimeout)

	tokenReader := newExplainReader(t)
	bindExplainRoles(t, explainUser)
	const certUser = "explain-cert-reader"
	cert, err := clientCA.userCert(certUser)
	if err != nil {
		t.Fatal(err)
	}
	bindExplainRoles(t, certUser)
	// Asked before the API server applies a binding, the leader would cache
	// its refusal for 10 s.
	for _, user := range []string{explainUser, certUser} {
		suite.EventuallySucceeds(t, operationTimeout, user+" to be allowed get on "+explainURL, func() error {
			return allowed(t.Context(), user, explainURL)
		})
	}
	for _, c := range []struct {
		name   string
		reader *explainReader
	}{
		{"a ServiceAccount token", tokenReader},
		{"a client certificate", &explainReader{kubeconfig: writeCertKubeconfig(t, certUser, cert)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := kubelet.forwarded.Load()
			var stdout, stderr string
			suite.EventuallySucceeds(t, operationTimeout, "explain to get the leader's answer", func() error {
				var err error
				stdout, stderr, err = c.reader.explain(t, "--from-leader", "pod/app", "-n", w.Namespace)
				if err != nil || strings.Contains(stderr, "Could not ask the leader") {
					return fmt.Errorf("explain: %v\n%s", err, stderr)
				}
				return nil
			})
			if !strings.Contains(stdout, "as the leader saw it") {
				t.Errorf("explain did not print the leader's answer:\n%s", stdout)
			}
			if want := "VolumeAttachment " + v.AttachmentName(w.Nodes[0]) + ": attached"; !strings.Contains(stdout, want) {
				t.Errorf("explain does not say %q:\n%s", want, stdout)
			}
			if kubelet.forwarded.Load() == before {
				t.Error("the answer did not come through the kubelet's port-forward")
			}
		})
	}
	checkRequestsGranted(t, r)
}

// TestAPIServerProxyCarriesNoIdentity shows why explain --from-leader does not
// go through the API server's proxy (pods/proxy; services/proxy connects the
// same way): the API server authenticates the caller, removes its credentials,
// and connects to the pod with none of its own, so the leader sees an anonymous
// request. A probe goes through; /metrics is refused (401) even to the cluster
// admin, whom the API server let through. The replica listens on an address of
// this machine that the API server proxies to, as a pod's IP.
func TestAPIServerProxyCarriesNoIdentity(t *testing.T) {
	ip := globalUnicastAddress(t)
	installManifests(t)
	const lease = "proxy"
	r := startReplica(t, "proxy", replicaOptions{
		account:      controllerAccount,
		lease:        lease,
		httpEndpoint: net.JoinHostPort(ip, "0"),
	})
	waitLeader(t, lease, r, operationTimeout)
	pod := leaderPodName(t, lease)
	createLeaderPod(t, pod, "", ip)
	_, port, err := net.SplitHostPort(r.waitLog(servingAddress))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := rest.HTTPClientFor(env.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	// The bodies are the controller's, not the API server's.
	const refused = "Unauthorized: send a bearer token the API server accepts"
	for _, c := range []struct {
		path string
		want int
		body string
	}{
		{"healthz", http.StatusOK, "ok"},
		{"metrics", http.StatusUnauthorized, refused},
		{"debug/explain", http.StatusUnauthorized, refused},
	} {
		t.Run(c.path, func(t *testing.T) {
			u := env.Host + "/api/v1/namespaces/" + controllerNamespace + "/pods/https:" + pod + ":" + port + "/proxy/" + c.path
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := admin.Do(req)
			if err != nil {
				t.Fatalf("GET %s: %v", u, err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("reading %s: %v", u, err)
			}
			if resp.StatusCode != c.want || !strings.Contains(string(body), c.body) {
				t.Errorf("GET %s through pods/proxy as the cluster admin = %d %q, want %d and the controller's %q", c.path, resp.StatusCode, body, c.want, c.body)
			}
		})
	}
}

// leaderPodName is the pod the Lease's holder runs in, as explain reads it: the
// replica's host name, its identity up to the "_".
func leaderPodName(t *testing.T, lease string) string {
	t.Helper()
	pod, _, _ := strings.Cut(leaseHolder(t, lease), "_")
	if pod == "" {
		t.Fatalf("the Lease %s has no holder", lease)
	}
	return pod
}

// createLeaderPod creates the pod a replica of the Deployment would run in: on
// the node, if not empty, and with the IP, if not empty. It is deleted when the
// test ends.
func createLeaderPod(t *testing.T, name, node, ip string) {
	t.Helper()
	pods := env.Client.CoreV1().Pods(controllerNamespace)
	c := controllerContainer(t)
	created, err := pods.Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/name": "attachdetach-controller"}},
		Spec: corev1.PodSpec{
			NodeName:        node,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name:            c.Name,
				Image:           c.Image,
				Ports:           c.Ports,
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := pods.Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Errorf("deleting pod %s: %v", name, err)
		}
	})
	if ip == "" {
		return
	}
	created.Status.PodIP = ip
	created.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	if _, err := pods.UpdateStatus(t.Context(), created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("setting the IP of pod %s: %v", name, err)
	}
}

// globalUnicastAddress is an IPv4 address of this machine the API server
// proxies to (it refuses loopback and link-local addresses); the test is
// skipped on a machine without one.
func globalUnicastAddress(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatalf("listing this machine's addresses: %v", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("this machine has no global unicast IPv4 address for the API server to proxy to")
	return ""
}

// writeCertKubeconfig writes a kubeconfig for the suite's API server that
// authenticates with the user's client certificate, and returns its path.
func writeCertKubeconfig(t *testing.T, user string, cert *clientCert) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["deploy"] = &clientcmdapi.Cluster{Server: env.Host, CertificateAuthorityData: env.CAData}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: cert.certPEM, ClientKeyData: cert.keyPEM}
	cfg.Contexts["deploy"] = &clientcmdapi.Context{Cluster: "deploy", AuthInfo: user}
	cfg.CurrentContext = "deploy"
	path := filepath.Join(t.TempDir(), user+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatalf("writing the kubeconfig of %s: %v", user, err)
	}
	return path
}
