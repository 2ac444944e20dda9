package deploy

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/attachdetach-controller/attachdetach-controller/internal/suite"
	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
)

// The ServiceAccounts the endpoint tests scrape or ask as: Prometheus's, bound to
// the metrics-reader ClusterRole, an operator's, bound to the explain-reader
// component's ClusterRole, and one bound to nothing.
const (
	metricsReaderAccount = "metrics-reader"
	operatorAccount      = "explain-operator"
	unboundAccount       = "unbound"
)

// The users the endpoint tests ask as with a client certificate the API
// server's client CA signed: an operator bound to the explain-reader
// component's ClusterRole, and one bound to nothing.
const (
	certOperatorUser = "explain-cert-operator"
	certUnboundUser  = "cert-unbound"
)

// TestEndpointAuthorization runs the controller as deployed, with the manifests'
// ServiceAccount and arguments, and asks its HTTPS endpoint as each identity: the
// probes answer anyone, every other path needs a token the API server accepts
// (401 without one) and RBAC permission for the path (403 without it); the
// metrics-reader ClusterRole reads /metrics and not /debug/explain, the
// explain-reader component's ClusterRole reads /debug/explain, also through
// explain --from-leader. Users with a client certificate of the cluster's client
// CA are authenticated as by the API server, as kube-controller-manager does:
// the controller reads that CA from the API server's authentication ConfigMap;
// a certificate of another CA is refused (401). The reviews the controller
// sends, and its reads of the ConfigMap, are granted by its ClusterRoles.
func TestEndpointAuthorization(t *testing.T) {
	installManifests(t)
	if _, _, err := kubectl(t.Context(), "apply", "-k", overlayWithComponent(t, explainComponent)); err != nil {
		t.Fatal(err)
	}
	const lease = "endpoint"
	r := startReplica(t, "endpoint", replicaOptions{
		account: controllerAccount,
		lease:   lease,
		args:    append(deploymentArgs(t), "--leader-elect-resource-name="+lease),
	})
	waitLeader(t, lease, r, operationTimeout)
	w := suite.NewSimWorld(t, env.Env, suite.SimOptions{Nodes: 1})
	explainNode := explainURL + "?target=node/" + w.Nodes[0]

	metricsReader := metricsReaderToken(t)
	operator := boundToken(t, operatorAccount, explainClusterRole, explainURL)
	unbound, err := env.ServiceAccountToken(t.Context(), controllerNamespace, unboundAccount)
	if err != nil {
		t.Fatal(err)
	}
	certOperator := boundCert(t, certOperatorUser, explainClusterRole, explainURL)
	certUnbound, err := clientCA.userCert(certUnboundUser)
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := newCertAuthority("not-the-cluster's-client-ca")
	if err != nil {
		t.Fatal(err)
	}
	// The operator's name, signed by a CA the API server does not trust.
	foreignCert, err := otherCA.userCert(certOperatorUser)
	if err != nil {
		t.Fatal(err)
	}
	// The leader answers explanations once it has rebuilt its state, and
	// accepts client certificates once it has read the client CA.
	suite.Eventually(t, operationTimeout, "the leader to answer "+explainNode, func() bool {
		code, _ := r.request(http.MethodGet, explainNode, operator)
		return code == http.StatusOK
	})
	suite.Eventually(t, operationTimeout, "the leader to answer "+explainNode+" to "+certOperatorUser+"'s certificate", func() bool {
		code, _ := r.requestWithCert(http.MethodGet, explainNode, &certOperator.tls)
		return code == http.StatusOK
	})

	for _, c := range []struct {
		name   string
		method string
		path   string
		token  string
		cert   *clientCert
		want   int
	}{
		{"liveness probe without a token", http.MethodGet, "/healthz", "", nil, http.StatusOK},
		{"readiness probe without a token", http.MethodGet, "/readyz", "", nil, http.StatusOK},
		{"metrics without a token", http.MethodGet, "/metrics", "", nil, http.StatusUnauthorized},
		{"explain without a token", http.MethodGet, explainNode, "", nil, http.StatusUnauthorized},
		{"metrics with a token the API server does not know", http.MethodGet, "/metrics", "not-a-token", nil, http.StatusUnauthorized},
		{"metrics as a ServiceAccount bound to nothing", http.MethodGet, "/metrics", unbound, nil, http.StatusForbidden},
		{"explain as a ServiceAccount bound to nothing", http.MethodGet, explainNode, unbound, nil, http.StatusForbidden},
		{"metrics as the metrics reader", http.MethodGet, "/metrics", metricsReader, nil, http.StatusOK},
		{"explain as the metrics reader", http.MethodGet, explainNode, metricsReader, nil, http.StatusForbidden},
		{"verbosity as the metrics reader, a put", http.MethodPut, verbosityURL, metricsReader, nil, http.StatusForbidden},
		{"explain as the explain reader", http.MethodGet, explainNode, operator, nil, http.StatusOK},
		{"metrics as the explain reader", http.MethodGet, "/metrics", operator, nil, http.StatusForbidden},
		{"explain with the explain reader's client certificate", http.MethodGet, explainNode, "", certOperator, http.StatusOK},
		{"metrics with the explain reader's client certificate", http.MethodGet, "/metrics", "", certOperator, http.StatusForbidden},
		{"explain with the client certificate of a user bound to nothing", http.MethodGet, explainNode, "", certUnbound, http.StatusForbidden},
		{"explain with a client certificate of another CA", http.MethodGet, explainNode, "", foreignCert, http.StatusUnauthorized},
	} {
		t.Run(c.name, func(t *testing.T) {
			var cert *tls.Certificate
			if c.cert != nil {
				cert = &c.cert.tls
			}
			code, body := r.send(c.method, c.path, c.token, cert)
			if code != c.want {
				t.Errorf("%s %s = %d, want %d: %s", c.method, c.path, code, c.want, strings.TrimSpace(string(body)))
			}
		})
	}

	t.Run("explain --from-leader over HTTPS with the operator's kubeconfig", func(t *testing.T) {
		kubeconfig := filepath.Join(t.TempDir(), "operator.kubeconfig")
		if err := env.WriteKubeconfig(kubeconfig, operator); err != nil {
			t.Fatal(err)
		}
		addr := r.waitLog(`"Serving probes and metrics" address="([^"]+)"`)
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		reader := &explainReader{kubeconfig: kubeconfig}
		stdout, stderr, err := reader.explain(t, "--from-leader", "--leader-url=https://127.0.0.1:"+port, "node/"+w.Nodes[0])
		if err != nil {
			t.Fatalf("explain: %v\n%s", err, stderr)
		}
		if strings.Contains(stderr, "Could not ask the leader") || !strings.Contains(stdout, "as the leader saw it") {
			t.Errorf("explain did not get the leader's answer:\n%s\n%s", stdout, stderr)
		}
	})

	checkRequestsGranted(t, r)
}

// boundCert binds the ClusterRole to a user, once for the whole run, waits
// until the API server lets the user get the path, and returns a client
// certificate of the user signed by the cluster's client CA.
func boundCert(t *testing.T, user, clusterRole, path string) *clientCert {
	t.Helper()
	cert, err := clientCA.userCert(user)
	if err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: clusterRole + "-" + user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := env.Client.RbacV1().ClusterRoleBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("binding %s to %s: %v", clusterRole, user, err)
	}
	suite.EventuallySucceeds(t, operationTimeout, user+" to be allowed get on "+path, func() error {
		return allowed(t.Context(), user, path)
	})
	return cert
}

// verbosityURL is the endpoint's PUT of -v, which needs put on the path.
const verbosityURL = "/debug/flags/v"

// metricsReaderToken returns a token of a ServiceAccount bound to the manifests'
// metrics-reader ClusterRole, as Prometheus's is.
func metricsReaderToken(t *testing.T) string {
	t.Helper()
	return boundToken(t, metricsReaderAccount, metricsReaderClusterRole, "/metrics")
}

// boundToken binds the ClusterRole to a ServiceAccount of the controller's
// namespace, once for the whole run, waits until the API server lets it get the
// path, and returns a token of it.
func boundToken(t *testing.T, account, clusterRole, path string) string {
	t.Helper()
	token, err := env.ServiceAccountToken(t.Context(), controllerNamespace, account)
	if err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: clusterRole + "-" + account},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: controllerNamespace, Name: account}},
	}
	if _, err := env.Client.RbacV1().ClusterRoleBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("binding %s to %s: %v", clusterRole, account, err)
	}
	user := testenv.ServiceAccountUser(controllerNamespace, account)
	suite.EventuallySucceeds(t, operationTimeout, user+" to be allowed get on "+path, func() error {
		return allowed(t.Context(), user, path)
	})
	return token
}

// allowed asks the API server whether the user may get the non-resource URL.
func allowed(ctx context.Context, user, path string) error {
	review, err := env.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:                  user,
			Groups:                []string{"system:serviceaccounts", "system:authenticated"},
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: "get"},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	if !review.Status.Allowed {
		return fmt.Errorf("not allowed yet: %s", review.Status.Reason)
	}
	return nil
}
