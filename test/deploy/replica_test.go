package deploy

import (
	"cmp"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/internal/controllerproc"
	"github.com/attachdetach-controller/attachdetach-controller/internal/proc"
	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/controller"
)

// leaderMetric is the gauge that is 1 on the replica that leads.
const leaderMetric = "attachdetach_controller_leader"

// logTimeout bounds the wait for a line of a replica's log.
const logTimeout = 10 * time.Second

// replica is one controller process, running with a token of its own for a
// ServiceAccount of the controller's namespace.
type replica struct {
	t    *testing.T
	name string
	// credential is the ID the audit log gives the requests made with its token.
	credential string
	ctrl       *controllerproc.Controller
	proc       *proc.Process
}

type replicaOptions struct {
	// namespace holds the ServiceAccount and the Lease; controllerNamespace if empty.
	namespace string
	// account is the ServiceAccount, in namespace.
	account string
	// lease, if set, turns leader election on with this Lease in namespace.
	lease string
	// args are more flags, such as lease timings.
	args []string
	// httpEndpoint is where the HTTPS server listens: a free loopback port if
	// empty.
	httpEndpoint string
}

// startReplica starts a controller process; it is killed when the test ends if it
// still runs then.
func startReplica(t *testing.T, name string, o replicaOptions) *replica {
	t.Helper()
	namespace := cmp.Or(o.namespace, controllerNamespace)
	token, err := env.ServiceAccountToken(t.Context(), namespace, o.account)
	if err != nil {
		t.Fatal(err)
	}
	credential, err := credentialID(token)
	if err != nil {
		t.Fatalf("reading the token of %s: %v", o.account, err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, name+".kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig, token); err != nil {
		t.Fatal(err)
	}
	var args []string
	if o.lease != "" {
		args = append(args, "--leader-elect-resource-namespace="+namespace, "--leader-elect-resource-name="+o.lease)
	}
	// The last occurrence of a flag wins.
	args = append(append(args, o.args...), "--http-endpoint="+cmp.Or(o.httpEndpoint, "127.0.0.1:0"))
	ctrl, err := controllerproc.New(t.Context(), controllerproc.Options{
		Binary:      env.Controller,
		Kubeconfig:  kubeconfig,
		LogFile:     filepath.Join(dir, name+".log"),
		LeaderElect: o.lease != "",
		// HTTPS, every path but the probes reviewed by the API server, as
		// deployed.
		SecureHTTP: true,
		Verbosity:  2,
		Args:       args,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctrl.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	p := ctrl.Process()
	r := &replica{t: t, name: name, credential: credential, ctrl: ctrl, proc: p}
	t.Cleanup(func() {
		if err := p.Kill(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("replica %s log (%s), last lines:\n%s", r.name, p.LogPath(), p.LogTail(40))
		}
	})
	return r
}

// kill stops the replica with SIGKILL, as a crash or a lost node would: it cannot
// release its Lease.
func (r *replica) kill() {
	r.t.Helper()
	if err := r.proc.Kill(); err != nil {
		r.t.Fatal(err)
	}
}

// terminate stops the replica with SIGTERM, as the kubelet does when the pod is
// deleted, and waits for it to exit within the Deployment's grace period.
func (r *replica) terminate() {
	r.t.Helper()
	if err := r.proc.Signal(syscall.SIGTERM); err != nil {
		r.t.Fatal(err)
	}
	select {
	case <-r.proc.Done():
	case <-time.After(30 * time.Second):
		r.t.Fatalf("replica %s still runs 30s after SIGTERM", r.name)
	}
	if err := r.proc.Err(); err != nil {
		r.t.Errorf("replica %s after SIGTERM: %v", r.name, err)
	}
}

// forbidden returns the log lines that report a request the API server refused for
// lack of permission.
func (r *replica) forbidden() []string {
	r.t.Helper()
	log, err := r.ctrl.Log()
	if err != nil {
		r.t.Fatal(err)
	}
	var lines []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "forbidden") {
			lines = append(lines, line)
		}
	}
	return lines
}

// waitLog waits for a log line matching the pattern and returns its first
// submatch.
func (r *replica) waitLog(pattern string) string {
	r.t.Helper()
	return suite.WaitLog(r.t, r.ctrl, logTimeout, pattern)
}

// waitStandby waits until the replica has seen the Lease held by another and is
// ready to take over, as a rolling update waits for it: its informers synced
// and /readyz OK.
func (r *replica) waitStandby() {
	r.t.Helper()
	r.waitLog(`"Another replica leads"`)
	r.waitLog(regexp.QuoteMeta(controller.PreparedLine))
	suite.Eventually(r.t, logTimeout, "the standby's /readyz to answer OK", func() bool {
		code, _ := r.get("/readyz")
		return code == http.StatusOK
	})
}

// get requests a path of the replica's HTTPS server without a token and returns
// the status code and the body.
func (r *replica) get(path string) (int, []byte) {
	r.t.Helper()
	return r.request(http.MethodGet, path, "")
}

// request sends a request for a path of the replica's HTTPS server, with the
// bearer token unless it is empty, and returns the status code and the body. The
// replica's certificate is self-signed, as by default in a pod: it is not checked.
func (r *replica) request(method, path, token string) (int, []byte) {
	r.t.Helper()
	return r.send(method, path, token, nil)
}

// requestWithCert sends a request for a path of the replica's HTTPS server with
// the client certificate, and returns the status code and the body.
func (r *replica) requestWithCert(method, path string, cert *tls.Certificate) (int, []byte) {
	r.t.Helper()
	return r.send(method, path, "", cert)
}

// send sends a request for a path of the replica's HTTPS server, with the bearer
// token unless it is empty, and the client certificate unless it is nil.
func (r *replica) send(method, path, token string, cert *tls.Certificate) (int, []byte) {
	r.t.Helper()
	addr := r.waitLog(`"Serving probes and metrics" address="([^"]+)"`)
	ctx, cancel := context.WithTimeout(r.t.Context(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "https://"+addr+path, nil)
	if err != nil {
		r.t.Fatalf("request for %s: %v", path, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	config := &tls.Config{InsecureSkipVerify: true}
	if cert != nil {
		config.Certificates = []tls.Certificate{*cert}
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: config}}
	resp, err := client.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s of replica %s: %v", method, path, r.name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatalf("reading %s of replica %s: %v", path, r.name, err)
	}
	return resp.StatusCode, body
}

// leaderGauge reads attachdetach_controller_leader from the replica's /metrics.
func (r *replica) leaderGauge() float64 {
	r.t.Helper()
	code, body := r.request(http.MethodGet, "/metrics", metricsReaderToken(r.t))
	if code != http.StatusOK {
		r.t.Fatalf("replica %s answered /metrics with %d", r.name, code)
	}
	m := regexp.MustCompile(`(?m)^` + leaderMetric + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		r.t.Fatalf("replica %s has no metric %s", r.name, leaderMetric)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		r.t.Fatalf("metric %s of replica %s: %v", leaderMetric, r.name, err)
	}
	return v
}

// leaseHolder returns the holder of the Lease, "" if it has none or does not exist.
func leaseHolder(t *testing.T, lease string) string {
	return suite.LeaseHolder(t.Context(), env.Client, controllerNamespace, lease)
}

// waitLeader waits until the replica holds the Lease and returns when it was seen.
func waitLeader(t *testing.T, lease string, r *replica, timeout time.Duration) time.Time {
	t.Helper()
	return suite.WaitLeader(t, env.Client, r.ctrl, controllerNamespace, lease, timeout)
}
