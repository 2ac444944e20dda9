package deploy

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/attachdetach-controller/attachdetach-controller/internal/rbacperm"
	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
	"github.com/attachdetach-controller/attachdetach-controller/internal/workload"
)

// operationTimeout bounds how long a test waits for one attach, detach or move.
const operationTimeout = 20 * time.Second

// TestManifestRBAC runs the controller as the manifests' ServiceAccount, with the
// Deployment's arguments, through attach, multi-attach refusal, detach and a move to
// another node. The API server must never refuse it anything, and it
// must use only what the manifests grant.
func TestManifestRBAC(t *testing.T) {
	installManifests(t)
	const lease = "rbac-cycle"
	w := suite.NewSimWorld(t, env.Env, suite.SimOptions{Nodes: 2})
	r := startReplica(t, "rbac", replicaOptions{
		account: controllerAccount,
		lease:   lease,
		args:    append(deploymentArgs(t), "--leader-elect-resource-name="+lease),
	})
	waitLeader(t, lease, r, operationTimeout)
	container := controllerContainer(t)
	for _, probe := range []*corev1.Probe{container.LivenessProbe, container.ReadinessProbe} {
		path := probe.HTTPGet.Path
		suite.Eventually(t, operationTimeout, "the leader to answer "+path, func() bool {
			code, _ := r.get(path)
			return code == http.StatusOK
		})
	}
	a, b := w.Nodes[0], w.Nodes[1]
	v := w.CreateVolume("data", workload.VolumeOptions{})
	attached := fmt.Sprintf("Normal SuccessfulAttachVolume AttachVolume.Attach succeeded for volume %q ", v.PV)

	w.CreatePod("first", a, v.Claim)
	waitAttachedOnlyTo(w, v, a, operationTimeout)
	w.WaitEvent("first", attached)

	w.CreatePod("second", b, v.Claim)
	w.WaitEvent("second", fmt.Sprintf("Warning FailedAttachVolume Waiting for detach for volume %q Volume is already used by pod(s) first", v.PV))
	if !attachedOnlyTo(w, v, a) {
		t.Fatalf("%s attached elsewhere than %s while pod first still uses it there: %v", v.PV, a, attachments(w, v))
	}

	w.DeletePod("first")
	waitAttachedOnlyTo(w, v, b, operationTimeout)
	w.WaitEvent("second", attached)

	w.DeletePod("second")
	waitDetachedEverywhere(w, v, operationTimeout)
	r.terminate()

	checkNoRefusals(t, []*replica{r})
	checkRequestsGranted(t, r)
}

// checkRequestsGranted checks in the audit log that every request of the replica
// was allowed and is granted by the rendered ClusterRole, or for its Lease by the
// rendered Role in its namespace, or for the client CA by the rendered client CA
// reader, by name.
func checkRequestsGranted(t *testing.T, r *replica) {
	t.Helper()
	all, err := auditedRequests()
	if err != nil {
		t.Fatal(err)
	}
	requests := requestsOf(all, r.credential)
	if len(requests) == 0 {
		t.Fatalf("no request of replica %s in the audit log", r.name)
	}
	clusterWide := permissions(renderedClusterRole(t, controllerClusterRole).Rules)
	inNamespace := permissions(renderedObject(t, "Role", &rbacv1.Role{}).Rules)
	clientCAReader := renderedClusterRole(t, clientCAReaderClusterRole).Rules
	used := map[permission]bool{}
	for _, req := range requests {
		used[req.permission] = true
		if req.code == 403 {
			t.Errorf("refused: %s", req)
		}
		granted := clusterWide[req.permission] || (req.namespace == controllerNamespace && inNamespace[req.permission]) ||
			grantedByName(clientCAReader, req)
		if !granted {
			t.Errorf("not granted by manifests/: %s", req)
		}
	}
	logUnusedPermissions(t, len(requests), clusterWide, used)
}

// grantedByName tells whether one of the rules names the request's object and
// grants its verb on its resource.
func grantedByName(rules []rbacv1.PolicyRule, req request) bool {
	return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.ResourceNames, req.name) && permissions([]rbacv1.PolicyRule{r})[req.permission]
	})
}

// logUnusedPermissions logs, after n requests, the ClusterRole permissions none of
// them used.
func logUnusedPermissions(t *testing.T, n int, clusterWide, used map[permission]bool) {
	t.Helper()
	var unused []string
	for _, p := range sortedPermissions(clusterWide) {
		if !used[p] {
			unused = append(unused, p.String())
		}
	}
	t.Logf("%d requests; ClusterRole permissions this run did not need: %v", n, unused)
}

// TestMissingPermissionFails runs the controller with the manifests' ClusterRole
// short of one verb and checks the controller cannot do its job and says why: a
// verb missing from the manifests fails the tests above.
func TestMissingPermissionFails(t *testing.T) {
	installManifests(t)
	rules := renderedClusterRole(t, controllerClusterRole).Rules
	cases := []struct {
		missing permission
		// exercise makes the controller need the missing permission.
		exercise func(w *suite.World, v workload.Volume)
		// failed tells whether the world shows the controller could not do its job.
		failed func(w *suite.World, v workload.Volume) bool
	}{
		{
			missing: permission{Group: "storage.k8s.io", Resource: "volumeattachments", Verb: "delete"},
			exercise: func(w *suite.World, v workload.Volume) {
				w.CreatePod("app", w.Nodes[0], v.Claim)
				waitAttachedOnlyTo(w, v, w.Nodes[0], operationTimeout)
				w.DeletePod("app")
			},
			failed: func(w *suite.World, v workload.Volume) bool { _, ok := attachments(w, v)[w.Nodes[0]]; return ok },
		},
		{
			missing:  permission{Group: "storage.k8s.io", Resource: "volumeattachments", Verb: "create"},
			exercise: func(w *suite.World, v workload.Volume) { w.CreatePod("app", w.Nodes[0], v.Claim) },
			failed:   func(w *suite.World, v workload.Volume) bool { return len(attachments(w, v)) == 0 },
		},
		{
			missing:  permission{Group: "", Resource: "nodes/status", Verb: "patch"},
			exercise: func(w *suite.World, v workload.Volume) { w.CreatePod("app", w.Nodes[0], v.Claim) },
			failed:   func(w *suite.World, v workload.Volume) bool { return !w.InNodeStatus(w.Nodes[0], v) },
		},
	}
	for _, c := range cases {
		t.Run("without "+c.missing.String(), func(t *testing.T) {
			account := "without-" + c.missing.Verb + "-" + strings.ReplaceAll(c.missing.Resource, "/", "-")
			bindAllBut(t, account, rules, c.missing)
			w := suite.NewSimWorld(t, env.Env, suite.SimOptions{Nodes: 1})
			r := startReplica(t, account, replicaOptions{account: account})
			v := w.CreateVolume("data", workload.VolumeOptions{})
			c.exercise(w, v)
			refusal := fmt.Sprintf("cannot %s resource %q", c.missing.Verb, c.missing.Resource)
			var line string
			suite.Eventually(t, operationTimeout, "the refusal in the controller's log", func() bool {
				lines := r.forbidden()
				i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, refusal) })
				if i >= 0 {
					line = lines[i]
				}
				return i >= 0
			})
			t.Logf("controller log: %s", line)
			if !c.failed(w, v) {
				t.Errorf("the controller was refused %s, yet did its job: %v", c.missing, attachments(w, v))
			}
		})
	}
}

// bindAllBut binds a copy of the rules without one permission to a ServiceAccount of
// the controller's namespace, through a ClusterRole and a ClusterRoleBinding named
// after it.
func bindAllBut(t *testing.T, account string, rules []rbacv1.PolicyRule, missing permission) {
	t.Helper()
	granted := permissions(rules)
	if !granted[missing] {
		t.Fatalf("the ClusterRole does not grant %s in the first place", missing)
	}
	delete(granted, missing)
	name := "attachdetach-controller-" + account
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rulesOf(granted)}
	if _, err := env.Client.RbacV1().ClusterRoles().Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ClusterRole %s: %v", name, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: controllerNamespace, Name: account}},
	}
	if _, err := env.Client.RbacV1().ClusterRoleBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ClusterRoleBinding %s: %v", name, err)
	}
}

// permission is one verb on one resource of an API group.
type permission = rbacperm.Permission

// permissions expands RBAC rules into the permissions they grant.
func permissions(rules []rbacv1.PolicyRule) map[permission]bool { return rbacperm.Of(rules) }

// rulesOf turns permissions back into rules, one per group and resource.
func rulesOf(granted map[permission]bool) []rbacv1.PolicyRule {
	type target struct{ group, resource string }
	verbs := map[target][]string{}
	for p := range granted {
		t := target{p.Group, p.Resource}
		verbs[t] = append(verbs[t], p.Verb)
	}
	var rules []rbacv1.PolicyRule
	for t, v := range verbs {
		slices.Sort(v)
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{t.group}, Resources: []string{t.resource}, Verbs: v})
	}
	return rules
}

func sortedPermissions(set map[permission]bool) []permission {
	return slices.SortedFunc(maps.Keys(set), func(a, b permission) int { return strings.Compare(a.String(), b.String()) })
}
