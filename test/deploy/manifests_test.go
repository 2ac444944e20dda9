package deploy

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/attachdetach-controller/attachdetach-controller/internal/manifest"
)

// informerPermissions is what the controller's informers do, and explain's
// snapshot with them: list and watch (or, with client-go's watch-list, only
// watch) each resource the controller reads.
var informerPermissions = []permission{
	{Group: "", Resource: "pods", Verb: "list"}, {Group: "", Resource: "pods", Verb: "watch"},
	{Group: "", Resource: "nodes", Verb: "list"}, {Group: "", Resource: "nodes", Verb: "watch"},
	{Group: "", Resource: "persistentvolumeclaims", Verb: "list"}, {Group: "", Resource: "persistentvolumeclaims", Verb: "watch"},
	{Group: "", Resource: "persistentvolumes", Verb: "list"}, {Group: "", Resource: "persistentvolumes", Verb: "watch"},
	{Group: "storage.k8s.io", Resource: "csidrivers", Verb: "list"}, {Group: "storage.k8s.io", Resource: "csidrivers", Verb: "watch"},
	{Group: "storage.k8s.io", Resource: "csinodes", Verb: "list"}, {Group: "storage.k8s.io", Resource: "csinodes", Verb: "watch"},
	{Group: "storage.k8s.io", Resource: "volumeattachments", Verb: "list"}, {Group: "storage.k8s.io", Resource: "volumeattachments", Verb: "watch"},
}

// controllerPermissions is everything the controller does with the API outside its
// leader Lease, and so exactly what the ClusterRole must grant: its informers'
// (the VolumeAttachments' list is also the quorum list after taking the lease)
// and these.
var controllerPermissions = append(slices.Clone(informerPermissions),
	// A node's status read from the API server before a detach.
	permission{Group: "", Resource: "nodes", Verb: "get"},
	// Attach and detach.
	permission{Group: "storage.k8s.io", Resource: "volumeattachments", Verb: "create"}, permission{Group: "storage.k8s.io", Resource: "volumeattachments", Verb: "delete"},
	// An object read back after a write of unknown outcome.
	permission{Group: "storage.k8s.io", Resource: "volumeattachments", Verb: "get"},
	// node.status.volumesAttached.
	permission{Group: "", Resource: "nodes/status", Verb: "patch"},
	// Pod events through client-go's core/v1 event recorder, which creates an event
	// and patches it when it repeats.
	permission{Group: "", Resource: "events", Verb: "create"}, permission{Group: "", Resource: "events", Verb: "patch"},
	// The HTTPS endpoint's reviews of a scraper's token and of its permission.
	permission{Group: "authentication.k8s.io", Resource: "tokenreviews", Verb: "create"}, permission{Group: "authorization.k8s.io", Resource: "subjectaccessreviews", Verb: "create"},
)

// leaderElectionPermissions is what client-go's Lease lock does with its Lease,
// and a standby's watch of it (package leasewatch), and so exactly what the
// leader-election Role must grant.
var leaderElectionPermissions = []permission{
	{Group: "coordination.k8s.io", Resource: "leases", Verb: "get"}, {Group: "coordination.k8s.io", Resource: "leases", Verb: "create"}, {Group: "coordination.k8s.io", Resource: "leases", Verb: "update"},
	{Group: "coordination.k8s.io", Resource: "leases", Verb: "list"}, {Group: "coordination.k8s.io", Resource: "leases", Verb: "watch"},
}

// renderManifests returns the objects `kubectl kustomize manifests/` renders.
func renderManifests(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	return render(t, manifests)
}

// render returns the objects `kubectl kustomize dir` renders.
func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	out, _, err := kubectl(t.Context(), "kustomize", dir)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifest.Decode(out)
	if err != nil {
		t.Fatalf("reading the rendered manifests: %v", err)
	}
	return objs
}

// renderedObjects returns the rendered objects of a kind.
func renderedObjects(t *testing.T, kind string) []*unstructured.Unstructured {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, obj := range renderManifests(t) {
		if obj.GetKind() == kind {
			found = append(found, obj)
		}
	}
	return found
}

// The ClusterRoles of manifests/: the controller's, the one for scrapers of its
// /metrics, and the controller's read of the cluster's client CA.
const (
	controllerClusterRole     = "attachdetach-controller"
	metricsReaderClusterRole  = "attachdetach-controller-metrics-reader"
	clientCAReaderClusterRole = "attachdetach-controller-client-ca-reader"
)

// The ConfigMap of kube-system in which the API server publishes its client CA.
const authenticationConfigMap = "extension-apiserver-authentication"

// TestClientCAReaderGrantsOneConfigMap checks the client CA reader ClusterRole
// grants only what the controller's informer of the API server's
// authentication ConfigMap does, list and watch, on that ConfigMap by name, and
// that it is bound to the controller's ServiceAccount alone.
func TestClientCAReaderGrantsOneConfigMap(t *testing.T) {
	role := renderedClusterRole(t, clientCAReaderClusterRole)
	want := []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"configmaps"},
		ResourceNames: []string{authenticationConfigMap}, Verbs: []string{"list", "watch"},
	}}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("ClusterRole %s rules = %+v, want %+v", role.Name, role.Rules, want)
	}
	var bound bool
	for _, obj := range renderedObjects(t, "ClusterRoleBinding") {
		binding := &rbacv1.ClusterRoleBinding{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, binding); err != nil {
			t.Fatalf("converting the rendered ClusterRoleBinding %s: %v", obj.GetName(), err)
		}
		if binding.RoleRef.Name != clientCAReaderClusterRole {
			continue
		}
		bound = true
		wantSubjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: controllerAccount, Namespace: controllerNamespace}}
		if !reflect.DeepEqual(binding.Subjects, wantSubjects) {
			t.Errorf("ClusterRoleBinding %s subjects = %+v, want %+v", binding.Name, binding.Subjects, wantSubjects)
		}
	}
	if !bound {
		t.Errorf("no ClusterRoleBinding binds %s", clientCAReaderClusterRole)
	}
}

// renderedClusterRole finds the rendered ClusterRole of that name.
func renderedClusterRole(t *testing.T, name string) *rbacv1.ClusterRole {
	t.Helper()
	for _, obj := range renderedObjects(t, "ClusterRole") {
		if obj.GetName() != name {
			continue
		}
		role := &rbacv1.ClusterRole{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, role); err != nil {
			t.Fatalf("converting the rendered ClusterRole %s: %v", name, err)
		}
		return role
	}
	t.Fatalf("manifests/ renders no ClusterRole %s", name)
	return nil
}

// renderedObject finds the one rendered object of a kind, converted to its Go type.
func renderedObject[T any](t *testing.T, kind string, into *T) *T {
	t.Helper()
	found := renderedObjects(t, kind)
	if len(found) != 1 {
		t.Fatalf("manifests/ renders %d objects of kind %s, want 1", len(found), kind)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(found[0].Object, into); err != nil {
		t.Fatalf("converting the rendered %s: %v", kind, err)
	}
	return into
}

// controllerContainer returns the container of the rendered Deployment.
func controllerContainer(t *testing.T) corev1.Container {
	t.Helper()
	containers := renderedObject(t, "Deployment", &appsv1.Deployment{}).Spec.Template.Spec.Containers
	if len(containers) != 1 {
		t.Fatalf("the Deployment has %d containers, want 1", len(containers))
	}
	return containers[0]
}

var envReference = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// deploymentArgs returns the arguments of the rendered Deployment's container as the
// kubelet passes them in a pod of the controller's namespace.
func deploymentArgs(t *testing.T) []string {
	t.Helper()
	return containerArgs(t, controllerContainer(t), controllerNamespace)
}

// containerArgs returns a container's arguments as the kubelet passes them in a pod
// of the namespace: with each $(VAR) replaced by the container's environment
// variable VAR.
func containerArgs(t *testing.T, c corev1.Container, namespace string) []string {
	t.Helper()
	vars := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			vars[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			vars[e.Name] = namespace
		}
	}
	args := make([]string, len(c.Args))
	for i, arg := range c.Args {
		args[i] = envReference.ReplaceAllStringFunc(arg, func(ref string) string {
			name := envReference.FindStringSubmatch(ref)[1]
			value, ok := vars[name]
			if !ok {
				t.Fatalf("argument %q refers to $(%s), which the test cannot resolve", arg, name)
			}
			return value
		})
	}
	return args
}

// installManifests applies manifests/ as a cluster admin would; applying again
// changes nothing.
func installManifests(t *testing.T) {
	t.Helper()
	if _, _, err := kubectl(t.Context(), "apply", "-k", manifests); err != nil {
		t.Fatal(err)
	}
}

// TestServerSideDryRun has the API server validate and admit every object of
// manifests/ without persisting any. Server-side dry run cannot create the namespace
// the other objects go into, so that one is applied first, from the manifests.
func TestServerSideDryRun(t *testing.T) {
	ns := renderedObjects(t, "Namespace")
	if len(ns) != 1 || ns[0].GetName() != controllerNamespace {
		t.Fatalf("manifests/ must create exactly the namespace %s", controllerNamespace)
	}
	nsJSON, err := ns[0].MarshalJSON()
	if err != nil {
		t.Fatalf("encoding the namespace: %v", err)
	}
	if _, _, err := env.Kubectl().Run(t.Context(), string(nsJSON), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := kubectl(t.Context(), "apply", "--dry-run=server", "-k", manifests)
	if err != nil {
		t.Fatal(err)
	}
	// Pod Security admission warns here about a pod template its namespace's
	// "restricted" level would reject; the API server warns about deprecated fields.
	if strings.TrimSpace(stderr) != "" {
		t.Errorf("kubectl apply --dry-run=server printed warnings:\n%s", stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if want := len(renderManifests(t)); len(lines) != want {
		t.Errorf("kubectl apply --dry-run=server reported %d objects, want the %d rendered:\n%s", len(lines), want, stdout)
	}
	for _, line := range lines {
		if !strings.HasSuffix(line, "(server dry run)") {
			t.Errorf("not a server dry run: %q", line)
		}
	}
}

// TestApplyIsIdempotent applies manifests/ for real and checks nothing differs from
// what is in the cluster afterwards.
func TestApplyIsIdempotent(t *testing.T) {
	installManifests(t)
	// kubectl diff exits 1 when there is a difference.
	if out, _, err := kubectl(t.Context(), "diff", "-k", manifests); err != nil {
		t.Fatalf("kubectl diff after apply: %v\n%s", err, out)
	}
}

// TestPriorityClass checks the Deployment's priority class is one every API server
// creates at start-up, so the pods are admitted without installing anything else.
func TestPriorityClass(t *testing.T) {
	deployment := renderedObject(t, "Deployment", &appsv1.Deployment{})
	name := deployment.Spec.Template.Spec.PriorityClassName
	if name != "system-cluster-critical" {
		t.Errorf("Deployment priorityClassName = %q, want system-cluster-critical", name)
	}
	pc, err := env.Client.SchedulingV1().PriorityClasses().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("priority class %q of the Deployment, on an API server nothing installed it in: %v", name, err)
	}
	t.Logf("priority class %s: value %d", pc.Name, pc.Value)
}

// TestProbesAndServiceReachTheServer checks the probes and the metrics Service go
// to the port the Deployment's arguments make the controller's HTTP server listen on.
func TestProbesAndServiceReachTheServer(t *testing.T) {
	c := controllerContainer(t)
	var endpoint string
	for _, arg := range deploymentArgs(t) {
		if v, ok := strings.CutPrefix(arg, "--http-endpoint="); ok {
			endpoint = v
		}
	}
	_, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		t.Fatalf("--http-endpoint %q of the Deployment: %v", endpoint, err)
	}
	containerPort := func(p intstr.IntOrString) string {
		if p.Type == intstr.Int {
			return p.String()
		}
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				return strconv.Itoa(int(cp.ContainerPort))
			}
		}
		return "no container port named " + p.StrVal
	}
	service := renderedObject(t, "Service", &corev1.Service{})
	if len(service.Spec.Ports) != 1 {
		t.Fatalf("Service %s has %d ports, want 1", service.Name, len(service.Spec.Ports))
	}
	for what, p := range map[string]intstr.IntOrString{
		"liveness probe":          c.LivenessProbe.HTTPGet.Port,
		"readiness probe":         c.ReadinessProbe.HTTPGet.Port,
		"Service " + service.Name: service.Spec.Ports[0].TargetPort,
	} {
		if got := containerPort(p); got != port {
			t.Errorf("%s goes to port %s (%s), the server listens on %s", what, p.String(), got, port)
		}
	}
}

// TestLeastPrivilege compares the rendered ClusterRole and leader-election Role
// with what the controller does, and checks they grant nothing on Secrets and no
// wildcard.
func TestLeastPrivilege(t *testing.T) {
	clusterRole := renderedClusterRole(t, controllerClusterRole)
	role := renderedObject(t, "Role", &rbacv1.Role{})
	if role.Namespace != controllerNamespace {
		t.Errorf("leader-election Role in namespace %q, want %q", role.Namespace, controllerNamespace)
	}
	for _, c := range []struct {
		name  string
		rules []rbacv1.PolicyRule
		want  []permission
	}{
		{"ClusterRole " + clusterRole.Name, clusterRole.Rules, controllerPermissions},
		{"Role " + role.Name, role.Rules, leaderElectionPermissions},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, r := range c.rules {
				if err := narrowRule(r); err != nil {
					t.Errorf("rule %v: %v", r, err)
				}
			}
			granted := permissions(c.rules)
			want := map[permission]bool{}
			for _, p := range c.want {
				want[p] = true
			}
			for _, p := range sortedPermissions(granted) {
				if !want[p] {
					t.Errorf("grants %s, which the controller never does", p)
				}
			}
			for _, p := range sortedPermissions(want) {
				if !granted[p] {
					t.Errorf("does not grant %s, which the controller needs", p)
				}
			}
		})
	}
}

// narrowRule refuses wildcards, Secrets, non-resource URLs and resource names.
func narrowRule(r rbacv1.PolicyRule) error {
	var errs []error
	for _, list := range [][]string{r.APIGroups, r.Resources, r.Verbs} {
		if slices.Contains(list, rbacv1.ResourceAll) {
			errs = append(errs, fmt.Errorf("wildcard in %v", list))
		}
	}
	for _, res := range r.Resources {
		if res == "secrets" || strings.HasPrefix(res, "secrets/") {
			errs = append(errs, fmt.Errorf("grants %v on %s", r.Verbs, res))
		}
	}
	if len(r.NonResourceURLs) > 0 {
		errs = append(errs, fmt.Errorf("non-resource URLs %v", r.NonResourceURLs))
	}
	if len(r.ResourceNames) > 0 {
		errs = append(errs, fmt.Errorf("resource names %v: the permissions checks here do not model them", r.ResourceNames))
	}
	return errors.Join(errs...)
}

// TestPrometheusRulesComponent: an overlay of the base with the
// prometheus-rules component renders the base's objects and the PrometheusRule in
// the controller's namespace.
func TestPrometheusRulesComponent(t *testing.T) {
	dir := overlayWithComponent(t, "prometheus-rules")
	objs := render(t, dir)
	if len(objs) != len(renderManifests(t))+1 {
		t.Errorf("the overlay renders %d objects, want the base's and one more", len(objs))
	}
	i := slices.IndexFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == "PrometheusRule" })
	if i < 0 {
		t.Fatal("no PrometheusRule rendered")
	}
	if ns := objs[i].GetNamespace(); ns != controllerNamespace {
		t.Errorf("PrometheusRule in namespace %q, want %q", ns, controllerNamespace)
	}
}

// overlayWithComponent writes, in a temporary directory, an overlay of manifests/
// with one of manifests/components, and returns the directory.
func overlayWithComponent(t *testing.T, component string) string {
	t.Helper()
	dir := t.TempDir()
	rel := func(path string) string {
		r, err := filepath.Rel(dir, path)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	kustomization := fmt.Sprintf("resources:\n  - %s\ncomponents:\n  - %s\n",
		rel(manifests), rel(filepath.Join(manifests, "components", component)))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
