package testenv

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/attachdetach-controller/attachdetach-controller/internal/proc"
)

// disabledAdmissionPlugins are default admission plugins that wait for controllers
// this control plane does not run:
//   - ServiceAccount rejects pods until the token controller has created the
//     namespace's "default" ServiceAccount;
//   - StorageObjectInUseProtection adds finalizers to PVCs and PVs that only the
//     PV-protection and PVC-protection controllers remove, so deleted claims and
//     volumes would linger for ever.
var disabledAdmissionPlugins = []string{"ServiceAccount", "StorageObjectInUseProtection"}

// serviceAccountIssuer is the issuer of ServiceAccount tokens, and their audience.
const serviceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// apiServerFiles are the files kube-apiserver is started with, all inside the
// environment's directory.
type apiServerFiles struct {
	certDir, tlsCert, tlsKey, tokenFile, signingKey, auditPolicy, auditLog, log string
}

func newAPIServerFiles(dir string) apiServerFiles {
	certDir := filepath.Join(dir, "certs")
	return apiServerFiles{
		certDir:     certDir,
		tlsCert:     filepath.Join(certDir, "apiserver.crt"),
		tlsKey:      filepath.Join(certDir, "apiserver.key"),
		tokenFile:   filepath.Join(certDir, "tokens.csv"),
		signingKey:  filepath.Join(certDir, "service-account.key"),
		auditPolicy: filepath.Join(dir, "audit-policy.yaml"),
		auditLog:    filepath.Join(dir, "audit.log"),
		log:         filepath.Join(dir, "kube-apiserver.log"),
	}
}

func apiServerArgs(files apiServerFiles, etcdURL string, port int, audit bool, extra []string) []string {
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + files.certDir,
		"--tls-cert-file=" + files.tlsCert,
		"--tls-private-key-file=" + files.tlsKey,
		"--authorization-mode=RBAC",
		"--token-auth-file=" + files.tokenFile,
		"--service-account-issuer=" + serviceAccountIssuer,
		"--service-account-key-file=" + files.signingKey,
		"--service-account-signing-key-file=" + files.signingKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--disable-admission-plugins=" + strings.Join(disabledAdmissionPlugins, ","),
		// No other masters share the "kubernetes" Service: skip its endpoint upkeep.
		"--endpoint-reconciler-type=none",
		// Without priority and fairness, a zero in-flight limit means no limit: load
		// tests measure the controller, not the test server's throttling.
		"--enable-priority-and-fairness=false",
		"--max-requests-inflight=0",
		"--max-mutating-requests-inflight=0",
		"--profiling=false",
		"--allow-privileged=true",
	}
	if audit {
		args = append(args,
			"--audit-policy-file="+files.auditPolicy,
			"--audit-log-path="+files.auditLog,
			"--audit-log-format=json",
			"--audit-log-mode=blocking",
			"--audit-log-maxsize=100000",
		)
	}
	return append(args, extra...)
}

// startAPIServer runs kube-apiserver on a free loopback port and waits until it is
// ready; it returns the process and its https URL.
func startAPIServer(ctx context.Context, binary string, files apiServerFiles, etcdURL string, audit bool, extra []string,
	connect func(host string) (kubernetes.Interface, error)) (*proc.Process, string, error) {
	var lastErr error
	for range startAttempts {
		ports, err := freePorts(1)
		if err != nil {
			return nil, "", err
		}
		host := "https://" + hostPort(ports[0])
		p, err := proc.Start("kube-apiserver", files.log, binary, apiServerArgs(files, etcdURL, ports[0], audit, extra)...)
		if err != nil {
			return nil, "", err
		}
		client, err := connect(host)
		if err == nil {
			err = waitAPIServerReady(ctx, p, client)
		}
		if err == nil {
			return p, host, nil
		}
		_ = p.Kill()
		tail := p.LogTail(30)
		lastErr = fmt.Errorf("%w\n--- last lines of %s ---\n%s", err, files.log, tail)
		if ctx.Err() != nil || !strings.Contains(tail, "address already in use") {
			break
		}
	}
	return nil, "", lastErr
}

// waitAPIServerReady waits until /readyz succeeds and the "default" namespace exists.
func waitAPIServerReady(ctx context.Context, p *proc.Process, client kubernetes.Interface) error {
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	var lastErr error
	for {
		if err := p.Exited(); err != nil {
			return err
		}
		lastErr = apiServerReady(ctx, client)
		if lastErr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for kube-apiserver to be ready (last: %v): %w", lastErr, ctx.Err())
		case <-ticker.C:
		}
	}
}

func apiServerReady(ctx context.Context, client kubernetes.Interface) error {
	reqCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(reqCtx); err != nil {
		return fmt.Errorf("readyz: %w", err)
	}
	_, err := client.CoreV1().Namespaces().Get(reqCtx, metav1.NamespaceDefault, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return errors.New(`namespace "default" not created yet`)
	}
	if err != nil {
		return fmt.Errorf("reading namespace default: %w", err)
	}
	return nil
}
