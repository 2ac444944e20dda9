package deploy

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

// The explain-reader component's roles, the Lease explain --from-leader reads by
// default (the manifests' own), and the ServiceAccount whose user name the test
// binds the roles to, as an operator binds a user.
const (
	explainComponent   = "explain-reader"
	explainClusterRole = "attachdetach-controller-explain"
	explainLeaderRole  = "attachdetach-controller-explain-leader"
	defaultLease       = "attachdetach-controller"
	explainAccount     = "explain-reader"
)

// explainPermissions is what explain's snapshot reads: the controller's informers.
var explainPermissions = informerPermissions

// explainLeaderPermissions is what explain --from-leader does in the leader's
// namespace: read the Lease, then forward a port to the pod it names through the
// API server.
var explainLeaderPermissions = []permission{
	{Group: "coordination.k8s.io", Resource: "leases", Verb: "get"},
	{Group: "", Resource: "pods/portforward", Verb: "create"},
}

// explainURL is the leader's path explain --from-leader asks with the user's
// token, which the ClusterRole grants as a non-resource URL.
const explainURL = "/debug/explain"

// explainUser is the user name explain runs as in TestExplainReaderRBAC.
var explainUser = testenv.ServiceAccountUser(controllerNamespace, explainAccount)

// TestExplainReaderRoles checks the explain-reader component's roles against what
// explain reads: the ClusterRole exactly the snapshot's list and watch, no write
// verb, no wildcard; the Role the Lease, by name, and the leader's proxy.
func TestExplainReaderRoles(t *testing.T) {
	clusterRole, role := explainRoles(t)
	for _, r := range clusterRole.Rules {
		if len(r.NonResourceURLs) > 0 {
			if !slices.Equal(r.NonResourceURLs, []string{explainURL}) || !slices.Equal(r.Verbs, []string{"get"}) || len(r.Resources) > 0 {
				t.Errorf("ClusterRole rule %v: want get on the non-resource URL %s alone", r, explainURL)
			}
			continue
		}
		if err := narrowRule(r); err != nil {
			t.Errorf("ClusterRole rule %v: %v", r, err)
		}
	}
	if !slices.ContainsFunc(clusterRole.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.NonResourceURLs, explainURL) }) {
		t.Errorf("ClusterRole %s does not grant get on %s, which explain --from-leader asks the leader", clusterRole.Name, explainURL)
	}
	for _, p := range sortedPermissions(permissions(clusterRole.Rules)) {
		if !slices.Contains([]string{"get", "list", "watch"}, p.Verb) {
			t.Errorf("ClusterRole %s grants %s, a write", clusterRole.Name, p)
		}
	}
	if role.Namespace != controllerNamespace {
		t.Errorf("Role %s in namespace %q, want %q", role.Name, role.Namespace, controllerNamespace)
	}
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "leases") && !slices.Equal(r.ResourceNames, []string{defaultLease}) {
			t.Errorf("Role %s grants leases %v, want only the Lease %s", role.Name, r.ResourceNames, defaultLease)
		}
	}
	for _, c := range []struct {
		name  string
		rules []rbacv1.PolicyRule
		want  []permission
	}{
		{"ClusterRole " + clusterRole.Name, clusterRole.Rules, explainPermissions},
		{"Role " + role.Name, role.Rules, explainLeaderPermissions},
	} {
		granted := permissions(c.rules)
		for _, p := range sortedPermissions(granted) {
			if !slices.Contains(c.want, p) {
				t.Errorf("%s grants %s, which explain never does", c.name, p)
			}
		}
		for _, p := range c.want {
			if !granted[p] {
				t.Errorf("%s does not grant %s, which explain does", c.name, p)
			}
		}
	}
}

// TestExplainReaderRBAC runs explain --from-leader with a kubeconfig of a user who
// is no admin, for a pod whose volume is attached: refused without the
// explain-reader roles, it explains the pod once they are bound as docs/deploy.md
// binds them, and every request it makes is granted by them.
func TestExplainReaderRBAC(t *testing.T) {
	installManifests(t)
	overlay := overlayWithComponent(t, explainComponent)
	if _, _, err := kubectl(t.Context(), "apply", "-k", overlay); err != nil {
		t.Fatal(err)
	}
	r := startReplica(t, "explain", replicaOptions{account: controllerAccount, lease: defaultLease})
	waitLeader(t, defaultLease, r, operationTimeout)
	w := suite.NewSimWorld(t, env.Env, suite.SimOptions{Nodes: 1})
	node := w.Nodes[0]
	v := w.CreateVolume("data", workload.VolumeOptions{})
	w.CreatePod("app", node, v.Claim)
	waitAttachedOnlyTo(w, v, node, operationTimeout)
	args := []string{"--from-leader", "pod/app", "-n", w.Namespace}

	t.Run("without bindings", func(t *testing.T) {
		reader := newExplainReader(t)
		// Unbound, explain fails at once, naming what it may not read.
		stdout, stderr, err := reader.explain(t, append(args, "--timeout=5s")...)
		if err == nil {
			t.Fatalf("explain succeeded without the roles bound:\n%s", stdout)
		}
		// klog quotes the informers' errors, escaping their quotes.
		unquoted := strings.ReplaceAll(stderr, `\"`, `"`)
		for _, refusal := range []*regexp.Regexp{
			regexp.MustCompile(`leases\.coordination\.k8s\.io "` + defaultLease + `" is forbidden: User "` + regexp.QuoteMeta(explainUser) + `" cannot get resource "leases"`),
			regexp.MustCompile(`is forbidden: User "` + regexp.QuoteMeta(explainUser) + `" cannot (list|watch) resource "pods"`),
			regexp.MustCompile(`explain needs list and watch on pods, nodes, `),
		} {
			if !refusal.MatchString(unquoted) {
				t.Errorf("explain's standard error does not match %q:\n%s", refusal, stderr)
			}
		}
		requests := reader.requests(t)
		if !slices.ContainsFunc(requests, func(r request) bool { return r.code == 403 }) {
			t.Errorf("no request refused in the audit log: %v", requests)
		}
	})

	t.Run("bound", func(t *testing.T) {
		bindExplainRoles(t, explainUser)
		// The probe has a token of its own, so that its requests do not count as
		// explain's.
		probe := newExplainReader(t)
		suite.EventuallySucceeds(t, operationTimeout, "the bound roles to take effect", func() error {
			if _, err := probe.client.CoordinationV1().Leases(controllerNamespace).Get(t.Context(), defaultLease, metav1.GetOptions{}); err != nil {
				return err
			}
			_, err := probe.client.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{Limit: 1})
			return err
		})
		reader := newExplainReader(t)
		stdout, stderr, err := reader.explain(t, args...)
		if err != nil {
			t.Fatalf("explain: %v\n%s", err, stderr)
		}
		if want := "VolumeAttachment " + v.AttachmentName(node) + ": attached"; !strings.Contains(stdout, want) {
			t.Errorf("explain does not say %q:\n%s", want, stdout)
		}
		// The leader runs outside the cluster, so no pod answers at the Lease's
		// holder: the port-forward is not found, having been allowed, and explain
		// reads the cluster instead. TestEndpointAuthorization asks a leader's
		// endpoint with this role's token.
		if strings.Contains(stderr, "forbidden") {
			t.Errorf("explain was refused something:\n%s", stderr)
		}
		t.Logf("explain's standard error: %s", strings.TrimSpace(stderr))
		checkExplainGranted(t, reader.requests(t))
	})
}

// checkExplainGranted checks every request explain made was allowed and granted by
// the component's roles, and that it read every resource the ClusterRole names and
// used both permissions of the Role.
func checkExplainGranted(t *testing.T, requests []request) {
	t.Helper()
	if len(requests) == 0 {
		t.Fatal("no request of explain in the audit log")
	}
	clusterRole, role := explainRoles(t)
	clusterWide, inNamespace := permissions(clusterRole.Rules), permissions(role.Rules)
	used := map[permission]bool{}
	read := map[string]bool{}
	for _, req := range requests {
		used[req.permission] = true
		read[req.permission.Group+"/"+req.permission.Resource] = true
		if req.code == 403 {
			t.Errorf("refused: %s", req)
		}
		byRole := req.namespace == controllerNamespace && inNamespace[req.permission] &&
			(req.permission.Resource != "leases" || req.name == defaultLease)
		if !clusterWide[req.permission] && !byRole {
			t.Errorf("not granted by the %s component: %s", explainComponent, req)
		}
	}
	for _, p := range sortedPermissions(clusterWide) {
		if resource := p.Group + "/" + p.Resource; !read[resource] {
			t.Errorf("ClusterRole %s grants %s, which explain did not read", clusterRole.Name, p)
			read[resource] = true
		}
	}
	for _, p := range explainLeaderPermissions {
		if !used[p] {
			t.Errorf("explain --from-leader did not %s", p)
		}
	}
	logUnusedPermissions(t, len(requests), clusterWide, used)
}

// explainReader is explain's user with a token of its own, so that the audit log
// tells its requests apart from those of the same user in another subtest.
type explainReader struct {
	kubeconfig string
	credential string
	client     kubernetes.Interface
}

func newExplainReader(t *testing.T) *explainReader {
	t.Helper()
	token, err := env.ServiceAccountToken(t.Context(), controllerNamespace, explainAccount)
	if err != nil {
		t.Fatal(err)
	}
	credential, err := credentialID(token)
	if err != nil {
		t.Fatalf("reading the token of %s: %v", explainAccount, err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "explain.kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig, token); err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(env.ConfigForToken(token))
	if err != nil {
		t.Fatalf("creating the client of %s: %v", explainAccount, err)
	}
	return &explainReader{kubeconfig: kubeconfig, credential: credential, client: client}
}

// explain runs the controller binary's explain command with the reader's
// kubeconfig.
func (e *explainReader) explain(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(t.Context(), env.Controller, append([]string{"explain", "--kubeconfig=" + e.kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// requests returns the reader's requests from the audit log.
func (e *explainReader) requests(t *testing.T) []request {
	t.Helper()
	all, err := auditedRequests()
	if err != nil {
		t.Fatal(err)
	}
	return requestsOf(all, e.credential)
}

// bindExplainRoles binds the component's roles to the user with the commands of
// docs/deploy.md, and removes the bindings when the test ends.
func bindExplainRoles(t *testing.T, user string) {
	t.Helper()
	name := "attachdetach-controller-explain-" + strings.NewReplacer(":", "-").Replace(user)
	for _, args := range [][]string{
		{"create", "clusterrolebinding", name, "--clusterrole=" + explainClusterRole, "--user=" + user},
		{"create", "rolebinding", name, "--namespace=" + controllerNamespace, "--role=" + explainLeaderRole, "--user=" + user},
	} {
		if _, _, err := kubectl(t.Context(), args...); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if err := env.Client.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting ClusterRoleBinding %s: %v", name, err)
		}
		if err := env.Client.RbacV1().RoleBindings(controllerNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting RoleBinding %s: %v", name, err)
		}
	})
}

// explainRoles renders the base with the explain-reader component and returns the
// component's ClusterRole and Role, checking it adds exactly those two objects.
func explainRoles(t *testing.T) (*rbacv1.ClusterRole, *rbacv1.Role) {
	t.Helper()
	objs := render(t, overlayWithComponent(t, explainComponent))
	if len(objs) != len(renderManifests(t))+2 {
		t.Errorf("the overlay renders %d objects, want the base's and two more", len(objs))
	}
	clusterRole := &rbacv1.ClusterRole{}
	role := &rbacv1.Role{}
	for kind, c := range map[string]struct {
		name string
		into any
	}{
		"ClusterRole": {explainClusterRole, clusterRole},
		"Role":        {explainLeaderRole, role},
	} {
		i := slices.IndexFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == kind && o.GetName() == c.name })
		if i < 0 {
			t.Fatalf("no %s %s rendered", kind, c.name)
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs[i].Object, c.into); err != nil {
			t.Fatalf("converting the rendered %s %s: %v", kind, c.name, err)
		}
	}
	return clusterRole, role
}
