package controller

import (
	"errors"
	"os"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/attachdetach-controller/attachdetach-controller/internal/rbacperm"
)

// refuseReadsTheRoleDoesNotGrant makes client answer every get, list and watch
// that the ClusterRole of manifests/ does not grant with Forbidden, as the API
// server does for the controller's service account. Writes are left alone: the
// tests themselves write through the same client.
func refuseReadsTheRoleDoesNotGrant(t *testing.T, client *fake.Clientset) {
	t.Helper()
	raw, err := os.ReadFile("../../manifests/clusterrole.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(raw, &role); err != nil {
		t.Fatal(err)
	}
	perms := rbacperm.Of(role.Rules)
	client.PrependReactor("*", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if verb := a.GetVerb(); (verb != "get" && verb != "list") || granted(perms, a) {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(a.GetResource().GroupResource(), "", errors.New("not granted by manifests/clusterrole.yaml"))
	})
	client.PrependWatchReactor("*", func(a clienttesting.Action) (bool, watch.Interface, error) {
		if granted(perms, a) {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(a.GetResource().GroupResource(), "", errors.New("not granted by manifests/clusterrole.yaml"))
	})
}

// granted tells whether the permissions let the action through.
func granted(perms map[rbacperm.Permission]bool, a clienttesting.Action) bool {
	resource := a.GetResource().Resource
	if sub := a.GetSubresource(); sub != "" {
		resource += "/" + sub
	}
	return perms[rbacperm.Permission{Group: a.GetResource().Group, Resource: resource, Verb: a.GetVerb()}]
}
