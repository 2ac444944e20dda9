package killproxy

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{}, func(e *testenv.Env) { env = e }))
}

func TestParseRequest(t *testing.T) {
	for path, want := range map[string]RequestInfo{
		"/api/v1/namespaces/ns/pods/p/status":                            {Version: "v1", Namespace: "ns", Resource: "pods", Name: "p", Subresource: "status"},
		"/api/v1/nodes/n1/status":                                        {Version: "v1", Resource: "nodes", Name: "n1", Subresource: "status"},
		"/api/v1/namespaces/ns/events":                                   {Version: "v1", Namespace: "ns", Resource: "events"},
		"/api/v1/namespaces/ns":                                          {Version: "v1", Namespace: "ns", Resource: "namespaces", Name: "ns"},
		"/apis/storage.k8s.io/v1/volumeattachments/csi-1":                {Group: "storage.k8s.io", Version: "v1", Resource: "volumeattachments", Name: "csi-1"},
		"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/adc": {Group: "coordination.k8s.io", Version: "v1", Namespace: "kube-system", Resource: "leases", Name: "adc"},
		"/healthz": {},
	} {
		if got := ParseRequest(path); got != want {
			t.Errorf("ParseRequest(%q) = %+v, want %+v", path, got, want)
		}
	}
}

func startProxy(t *testing.T, opts Options) (*Proxy, kubernetes.Interface) {
	t.Helper()
	if opts.Upstream == nil {
		opts.Upstream = env.AdminConfig()
	}
	p, err := Start(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	cfg := p.Config()
	cfg.QPS = -1
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("creating client through the proxy: %v", err)
	}
	return p, client
}

func createNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := env.Client.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
}

func configMap(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

// TestUpstreamIdentity checks the proxy authenticates with its upstream credentials,
// whatever the client sends, and that its kubeconfig works.
func TestUpstreamIdentity(t *testing.T) {
	createNamespace(t, "identity")
	saConfig, err := env.ServiceAccountConfig(t.Context(), "identity", "controller")
	if err != nil {
		t.Fatal(err)
	}
	p, _ := startProxy(t, Options{Upstream: saConfig})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := p.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("loading kubeconfig: %v", err)
	}
	cfg.BearerToken = env.AdminToken // replaced by the proxy
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := client.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("asking who am I through the proxy: %v", err)
	}
	if got, want := review.Status.UserInfo.Username, testenv.ServiceAccountUser("identity", "controller"); got != want {
		t.Errorf("proxy authenticates as %q, want %q", got, want)
	}
}

func TestWatchStreams(t *testing.T) {
	createNamespace(t, "watch")
	_, client := startProxy(t, Options{})
	w, err := client.CoreV1().ConfigMaps("watch").Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watching through the proxy: %v", err)
	}
	defer w.Stop()
	for i := range 3 {
		name := fmt.Sprintf("cm-%d", i)
		if _, err := env.Client.CoreV1().ConfigMaps("watch").Create(t.Context(), configMap("watch", name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-w.ResultChan():
			if cm, ok := ev.Object.(*corev1.ConfigMap); ev.Type != watch.Added || !ok || cm.Name != name {
				t.Fatalf("watch event %s %+v, want ADDED %s", ev.Type, ev.Object, name)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no watch event for %s through the proxy", name)
		}
	}
}

func TestKillAfter(t *testing.T) {
	const ns, n = "kill", 2
	createNamespace(t, ns)
	p, client := startProxy(t, Options{Counts: ExcludeResources("events")})
	var countAtKill int
	killed := p.KillAfter(n, func() { countAtKill = p.Count() })

	event := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: "not-counted"},
		InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Namespace: ns, Name: "cm-1"},
		Reason:         "Test", Type: corev1.EventTypeNormal,
	}
	if _, err := client.CoreV1().Events(ns).Create(t.Context(), event, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating an event, not counted: %v", err)
	}
	for i := 1; i <= n+2; i++ {
		_, err := client.CoreV1().ConfigMaps(ns).Create(t.Context(), configMap(ns, fmt.Sprintf("cm-%d", i)), metav1.CreateOptions{})
		if i <= n && err != nil {
			t.Fatalf("write %d, before the kill: %v", i, err)
		}
		if i > n && err == nil {
			t.Fatalf("write %d, after the kill, succeeded", i)
		}
		if _, err := client.CoreV1().ConfigMaps(ns).Get(t.Context(), fmt.Sprintf("cm-%d", i), metav1.GetOptions{}); (i <= n) != (err == nil) || (err != nil && !apierrors.IsNotFound(err)) {
			t.Errorf("configmap cm-%d after write %d: %v", i, i, err)
		}
	}
	select {
	case <-killed:
	default:
		t.Fatal("kill function not called")
	}
	if countAtKill != n+1 {
		t.Errorf("kill ran when %d writes were seen, want %d", countAtKill, n+1)
	}

	var log []string
	for _, w := range p.Writes() {
		log = append(log, w.String())
	}
	want := []string{
		"#1 POST /api/v1/namespaces/kill/configmaps -> forwarded 201",
		"#2 POST /api/v1/namespaces/kill/configmaps -> forwarded 201",
		"#3 POST /api/v1/namespaces/kill/configmaps -> killed 503",
		"#4 POST /api/v1/namespaces/kill/configmaps -> rejected 503",
	}
	if strings.Join(log, "\n") != strings.Join(want, "\n") {
		t.Errorf("writes:\n%s\nwant:\n%s", strings.Join(log, "\n"), strings.Join(want, "\n"))
	}

	p.Reset()
	if _, err := client.CoreV1().ConfigMaps(ns).Create(t.Context(), configMap(ns, "after-reset"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("write after Reset: %v", err)
	}
	if got := p.Writes(); len(got) != 1 || got[0].Seq != 1 {
		t.Errorf("writes after Reset = %v, want one numbered 1", got)
	}
}

// TestWriteIsRecordedBeforeItsAnswer: once a client has the answer to a write,
// Writes already shows where it went (the partition test once read the record of
// its last write before the proxy had filled it in).
func TestWriteIsRecordedBeforeItsAnswer(t *testing.T) {
	const ns = "recorded"
	createNamespace(t, ns)
	p, client := startProxy(t, Options{})
	for i := range 300 {
		if _, err := client.CoreV1().ConfigMaps(ns).Create(t.Context(), configMap(ns, fmt.Sprintf("cm-%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		writes := p.Writes()
		if last := writes[len(writes)-1]; !last.Reached() || last.Outcome != Forwarded || last.Status != http.StatusCreated {
			t.Fatalf("create %d answered, but its record reads %s", i, last)
		}
	}
}
