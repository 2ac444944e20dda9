package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
	"github.com/attachdetach-controller/attachdetach-controller/internal/proc"
)

// AdminUser is the name of the static-token user in group system:masters.
const AdminUser = "testenv-admin"

// defaultStartTimeout bounds start-up once the binaries are available.
const defaultStartTimeout = 90 * time.Second

// serviceAccountTokenTTL is how long tokens minted by ServiceAccountConfig are valid.
const serviceAccountTokenTTL = 24 * time.Hour

// User is an extra static-token user of the API server.
type User struct {
	Name   string
	Token  string
	Groups []string
}

// Options configures a control plane. The zero value is a plain control plane with
// only the admin user and no audit log.
type Options struct {
	// Users are static-token users in addition to the admin.
	Users []User
	// AuditUsers, when not empty, turns on the audit log: every request made by one
	// of these user names is recorded at Metadata level in Env.AuditLog.
	AuditUsers []string
	// APIServerFlags are appended to the kube-apiserver command line.
	APIServerFlags []string
	// BaseDir holds the environment's temporary directory. By default /dev/shm when
	// writable (etcd's fsyncs are cheap there), else the system temp dir (TempDir).
	BaseDir string
	// StartTimeout bounds start-up once the binaries are available (90s by default).
	StartTimeout time.Duration
	// EtcdBinary and APIServerBinary override the binaries; by default etcd from
	// PATH and kube-apiserver from binaries.Tool.
	EtcdBinary      string
	APIServerBinary string
}

// Env is a running control plane.
type Env struct {
	// Dir is the temporary directory holding etcd's data, certificates and logs.
	Dir string
	// Host is the API server's URL, https on a loopback port.
	Host string
	// CAData is the PEM certificate that signs the API server's serving certificate.
	CAData []byte
	// AdminToken authenticates as AdminUser, a member of system:masters.
	AdminToken string
	// AdminKubeconfig is the path of a kubeconfig for AdminUser, for processes such
	// as the controller and kubectl.
	AdminKubeconfig string
	// Client is an admin client without client-side rate limit.
	Client kubernetes.Interface
	// EtcdURL is etcd's client URL.
	EtcdURL string
	// EtcdLog, APIServerLog and AuditLog are the log files; AuditLog is empty without
	// Options.AuditUsers.
	EtcdLog, APIServerLog, AuditLog string
	// StartupDuration is how long Start took once the binaries were available.
	StartupDuration time.Duration

	etcd, apiServer *proc.Process

	mu       sync.Mutex
	keepLogs bool
	stopped  bool
}

// Start brings up etcd and kube-apiserver and returns once the API server is ready.
// ctx bounds the start-up only (including a first build of kube-apiserver); the
// processes run until Stop.
func Start(ctx context.Context, opts Options) (*Env, error) {
	etcdBinary, apiServerBinary, err := findBinaries(ctx, opts)
	if err != nil {
		return nil, err
	}
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = defaultStartTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	begin := time.Now()

	dir, err := makeDir(opts.BaseDir)
	if err != nil {
		return nil, err
	}
	env := &Env{Dir: dir, EtcdLog: filepath.Join(dir, "etcd.log")}
	if err := env.start(ctx, opts, etcdBinary, apiServerBinary); err != nil {
		env.KeepLogs()
		env.Stop()
		return nil, fmt.Errorf("starting control plane (logs in %s): %w", dir, err)
	}
	env.StartupDuration = time.Since(begin)
	klog.FromContext(ctx).V(1).Info("Control plane ready", "host", env.Host, "dir", dir, "startup", env.StartupDuration)
	return env, nil
}

func (e *Env) start(ctx context.Context, opts Options, etcdBinary, apiServerBinary string) error {
	files := newAPIServerFiles(e.Dir)
	if err := os.MkdirAll(files.certDir, 0o700); err != nil {
		return fmt.Errorf("creating cert dir: %w", err)
	}
	var err error
	if e.CAData, err = writeServingCert(files.tlsCert, files.tlsKey); err != nil {
		return err
	}
	if err := writeSigningKey(files.signingKey); err != nil {
		return err
	}
	if e.AdminToken, err = NewToken(); err != nil {
		return err
	}
	users := append([]User{{Name: AdminUser, Token: e.AdminToken, Groups: []string{"system:masters"}}}, opts.Users...)
	if err := writeTokenFile(files.tokenFile, users); err != nil {
		return err
	}
	audit := len(opts.AuditUsers) > 0
	if audit {
		if err := writeAuditPolicy(files.auditPolicy, opts.AuditUsers); err != nil {
			return err
		}
		e.AuditLog = files.auditLog
	}
	e.APIServerLog = files.log

	if e.etcd, e.EtcdURL, err = startEtcd(ctx, etcdBinary, e.Dir, e.EtcdLog); err != nil {
		return err
	}
	connect := func(host string) (kubernetes.Interface, error) {
		e.Host = host
		client, err := kubernetes.NewForConfig(e.AdminConfig())
		if err != nil {
			return nil, fmt.Errorf("creating admin client: %w", err)
		}
		e.Client = client
		return client, nil
	}
	if e.apiServer, e.Host, err = startAPIServer(ctx, apiServerBinary, files, e.EtcdURL, audit, opts.APIServerFlags, connect); err != nil {
		return err
	}
	e.AdminKubeconfig = filepath.Join(e.Dir, "admin.kubeconfig")
	return e.WriteAdminKubeconfig(e.AdminKubeconfig)
}

func findBinaries(ctx context.Context, opts Options) (etcd, apiServer string, err error) {
	etcd = opts.EtcdBinary
	if etcd == "" {
		if etcd, err = exec.LookPath("etcd"); err != nil {
			return "", "", fmt.Errorf("etcd not found (Debian: apt-get install etcd-server): %w", err)
		}
	}
	apiServer = opts.APIServerBinary
	if apiServer == "" {
		if apiServer, err = binaries.Tool(ctx, binaries.KubeAPIServer); err != nil {
			return "", "", err
		}
	}
	return etcd, apiServer, nil
}

// makeDir makes the environment's directory in base, or with TempDir.
func makeDir(base string) (string, error) {
	if base == "" {
		return TempDir("testenv-")
	}
	dir, err := os.MkdirTemp(base, "testenv-")
	if err != nil {
		return "", fmt.Errorf("creating the control plane directory: %w", err)
	}
	return dir, nil
}

// TempDir makes a new temporary directory, in /dev/shm where possible: etcd's fsyncs
// are much cheaper there.
func TempDir(prefix string) (string, error) {
	if dir, err := os.MkdirTemp("/dev/shm", prefix); err == nil {
		return dir, nil
	}
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", fmt.Errorf("creating a temporary directory: %w", err)
	}
	return dir, nil
}

// writeTokenFile writes kube-apiserver's static token file: token,user,uid,"groups".
func writeTokenFile(path string, users []User) error {
	var b strings.Builder
	for _, u := range users {
		if u.Name == "" || u.Token == "" {
			return fmt.Errorf("static-token user %q needs a name and a token", u.Name)
		}
		fmt.Fprintf(&b, "%s,%s,%s,%q\n", u.Token, u.Name, u.Name, strings.Join(u.Groups, ","))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("writing token file: %w", err)
	}
	return nil
}

// AdminConfig returns a new admin client configuration without client-side rate limit.
func (e *Env) AdminConfig() *rest.Config {
	cfg := e.ConfigForToken(e.AdminToken)
	cfg.QPS = -1
	return cfg
}

// ConfigForToken returns a new client configuration that authenticates with a bearer
// token, with client-go's default rate limits.
func (e *Env) ConfigForToken(token string) *rest.Config {
	return &rest.Config{
		Host:            e.Host,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: append([]byte(nil), e.CAData...)},
	}
}

// WriteKubeconfig writes a kubeconfig file for the API server that authenticates with
// token.
func (e *Env) WriteKubeconfig(path, token string) error {
	const name = "testenv"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: e.Host, CertificateAuthorityData: e.CAData}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	cfg.CurrentContext = name
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}

// WriteAdminKubeconfig writes a kubeconfig file for the admin user.
func (e *Env) WriteAdminKubeconfig(path string) error {
	return e.WriteKubeconfig(path, e.AdminToken)
}

// ServiceAccountUser returns the user name a ServiceAccount authenticates as.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// ServiceAccountToken mints a token for a ServiceAccount through the TokenRequest API,
// creating the ServiceAccount first if it does not exist.
func (e *Env) ServiceAccountToken(ctx context.Context, namespace, name string) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if _, err := e.Client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating service account %s/%s: %w", namespace, name, err)
	}
	ttl := int64(serviceAccountTokenTTL / time.Second)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}
	resp, err := e.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for service account %s/%s: %w", namespace, name, err)
	}
	return resp.Status.Token, nil
}

// ServiceAccountConfig returns a client configuration that authenticates as a
// ServiceAccount (created if missing), so a client gets exactly the RBAC permissions
// bound to it. Rate limits are client-go's defaults.
func (e *Env) ServiceAccountConfig(ctx context.Context, namespace, name string) (*rest.Config, error) {
	token, err := e.ServiceAccountToken(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return e.ConfigForToken(token), nil
}

// LogLocations describes where the control plane's logs are.
func (e *Env) LogLocations() string {
	s := fmt.Sprintf("etcd log: %s\nkube-apiserver log: %s", e.EtcdLog, e.APIServerLog)
	if e.AuditLog != "" {
		s += "\naudit log: " + e.AuditLog
	}
	return s
}

// KeepLogs makes Stop leave the log files on disk and print where they are; call it
// when a test failed.
func (e *Env) KeepLogs() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.keepLogs = true
}

// Stop kills kube-apiserver and etcd with their process groups and removes the
// temporary directory (except the logs, after KeepLogs). It is safe to call twice.
func (e *Env) Stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return
	}
	e.stopped = true
	var errs []error
	for _, p := range []*proc.Process{e.apiServer, e.etcd} {
		if p != nil {
			errs = append(errs, p.Kill())
		}
	}
	if e.keepLogs {
		errs = append(errs, removeAllButLogs(e.Dir))
		fmt.Fprintf(os.Stderr, "testenv: control plane logs kept:\n%s\n", e.LogLocations())
	} else if err := os.RemoveAll(e.Dir); err != nil {
		errs = append(errs, fmt.Errorf("removing %s: %w", e.Dir, err))
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stopping control plane: %v\n", err)
	}
}

func removeAllButLogs(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("reading %s: %w", dir, err)
	}
	var errs []error
	for _, entry := range entries {
		if !strings.HasSuffix(entry.Name(), ".log") {
			errs = append(errs, os.RemoveAll(filepath.Join(dir, entry.Name())))
		}
	}
	return errors.Join(errs...)
}
