package testenv

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

var env *Env

const (
	alice      = "alice"
	aliceToken = "alice-token"
	auditNS    = "audited"
	auditSA    = "auditor"
)

func TestMain(m *testing.M) {
	os.Exit(Main(m, Options{
		Users:      []User{{Name: alice, Token: aliceToken, Groups: []string{"testers"}}},
		AuditUsers: []string{alice, ServiceAccountUser(auditNS, auditSA)},
	}, func(e *Env) { env = e }))
}

func createNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := env.Client.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
}

func clientFor(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("creating client: %v", err)
	}
	return client
}

// allowConfigMapReads binds a Role that lets subject read ConfigMaps in namespace.
func allowConfigMapReads(t *testing.T, namespace string, subject rbacv1.Subject) {
	t.Helper()
	ctx := t.Context()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "read-configmaps"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}}},
	}
	if _, err := env.Client.RbacV1().Roles(namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating role: %v", err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "read-configmaps-" + subject.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{subject},
	}
	if _, err := env.Client.RbacV1().RoleBindings(namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating role binding: %v", err)
	}
}

func TestStartup(t *testing.T) {
	t.Logf("control plane started in %v", env.StartupDuration)
	for _, path := range []string{env.EtcdLog, env.APIServerLog} {
		if _, err := os.Stat(path); err != nil {
			t.Errorf("log file: %v", err)
		}
	}
}

// TestAdmission checks the admission plugins that would need absent controllers are
// off: pods are admitted without a "default" ServiceAccount, and claims are not
// protected by finalizers nobody would remove.
func TestAdmission(t *testing.T) {
	ctx := t.Context()
	createNamespace(t, "admission")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "admission", Name: "pod"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	if _, err := env.Client.CoreV1().Pods("admission").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a pod in a namespace without default ServiceAccount: %v", err)
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "admission", Name: "claim"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	created, err := env.Client.CoreV1().PersistentVolumeClaims("admission").Create(ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating claim: %v", err)
	}
	if len(created.Finalizers) != 0 {
		t.Errorf("claim finalizers = %v, want none", created.Finalizers)
	}
}

func TestUsersAndServiceAccounts(t *testing.T) {
	ctx := t.Context()
	createNamespace(t, "authz")
	if _, err := env.ServiceAccountToken(ctx, "authz", "reader"); err != nil {
		t.Fatal(err)
	}
	allowConfigMapReads(t, "authz", rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: alice})
	allowConfigMapReads(t, "authz", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "authz", Name: "reader"})
	saConfig, err := env.ServiceAccountConfig(ctx, "authz", "reader")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig, aliceToken); err != nil {
		t.Fatal(err)
	}
	aliceConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("loading kubeconfig: %v", err)
	}
	for name, cfg := range map[string]*rest.Config{"static token user": aliceConfig, "service account": saConfig} {
		t.Run(name, func(t *testing.T) {
			client := clientFor(t, cfg)
			if _, err := client.CoreV1().ConfigMaps("authz").List(ctx, metav1.ListOptions{}); err != nil {
				t.Errorf("listing configmaps, allowed by RBAC: %v", err)
			}
			if _, err := client.CoreV1().Secrets("authz").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
				t.Errorf("listing secrets, not allowed by RBAC: got %v, want forbidden", err)
			}
		})
	}
}

func TestAdminKubeconfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.WriteAdminKubeconfig(path); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("loading kubeconfig: %v", err)
	}
	if _, err := clientFor(t, cfg).CoreV1().Nodes().List(t.Context(), metav1.ListOptions{}); err != nil {
		t.Errorf("listing nodes as admin: %v", err)
	}
}

func TestAuditLog(t *testing.T) {
	ctx := t.Context()
	createNamespace(t, auditNS)
	allowConfigMapReads(t, auditNS, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: auditNS, Name: auditSA})
	saConfig, err := env.ServiceAccountConfig(ctx, auditNS, auditSA)
	if err != nil {
		t.Fatal(err)
	}
	sa := clientFor(t, saConfig)
	for range 3 {
		if _, err := sa.CoreV1().ConfigMaps(auditNS).Get(ctx, "missing", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("getting missing configmap: got %v, want not found", err)
		}
	}
	if _, err := sa.CoreV1().ServiceAccounts(auditNS).Get(ctx, auditSA, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("getting service account: got %v, want forbidden", err)
	}
	if _, err := clientFor(t, env.ConfigForToken(aliceToken)).CoreV1().ConfigMaps(auditNS).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("listing configmaps as alice: got %v, want forbidden", err)
	}

	// The admin's requests in the namespace are not audited.
	saUser := ServiceAccountUser(auditNS, auditSA)
	want := RequestCounts{
		{User: saUser, Verb: "get", Resource: "configmaps"}:      3,
		{User: saUser, Verb: "get", Resource: "serviceaccounts"}: 1,
		{User: alice, Verb: "list", Resource: "configmaps"}:      1,
	}
	var got RequestCounts
	// Requests are logged when they end, maybe a moment after the client saw them end.
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		events, err := env.AuditEvents()
		if err != nil {
			return false, err
		}
		inNamespace := slices.DeleteFunc(events, func(ev AuditEvent) bool { return ev.Namespace != auditNS })
		got = CountRequests(inNamespace)
		return maps.Equal(got, want), nil
	})
	if err != nil {
		t.Fatalf("audit counts in namespace %s:\n%s\nwant:\n%s", auditNS, got, want)
	}
}

// TestWatchFromNow checks a watch without resourceVersion on a resource nobody writes
// starts at once: the API server's watch cache must learn etcd's current revision
// without waiting for a write to that resource.
func TestWatchFromNow(t *testing.T) {
	ctx := t.Context()
	createNamespace(t, "watch")
	for i := range 3 {
		start := time.Now()
		w, err := env.Client.CoreV1().Secrets("watch").Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("starting watch: %v", err)
		}
		name := fmt.Sprintf("secret-%d", i)
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "watch", Name: name}}
		if _, err := env.Client.CoreV1().Secrets("watch").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating secret: %v", err)
		}
		// Unrelated writes move etcd's revision on between the watches.
		if _, err := env.Client.CoreV1().ConfigMaps("watch").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "watch", Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating configmap: %v", err)
		}
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Added {
				t.Fatalf("watch event %s %+v, want ADDED", ev.Type, ev.Object)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("no watch event after 2s")
		}
		w.Stop()
		t.Logf("watch %d delivered its first event after %v", i, time.Since(start))
	}
}
