package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/authorization/path"
	"k8s.io/apiserver/pkg/authorization/union"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/version"
)

// probePaths answer without a token: kubelet's probes carry none. /livez is not
// served; it is open as on kube-controller-manager, so that a probe moved to it
// gets a 404 rather than a 401.
var probePaths = []string{"/healthz", "/readyz", "/livez"}

// privilegedGroups are allowed every path without a review: the API server's own
// authorizer allows them everything anyway.
var privilegedGroups = []string{"system:masters"}

// The ConfigMap in which the API server publishes the CA bundle it trusts for
// client certificates (its --client-ca-file), for servers that delegate
// authentication to it; kube-controller-manager reads it there too.
const (
	authenticationConfigMapNamespace = "kube-system"
	authenticationConfigMapName      = "extension-apiserver-authentication"
	clientCAKey                      = "client-ca-file"
)

// delegatedAuthCacheTTL is how long an answer of the API server about a token or
// a permission is reused, so that a scrape every few seconds costs one review
// per period, not one per scrape.
const delegatedAuthCacheTTL = 10 * time.Second

// reviewRetryBackoff retries a review the API server failed to answer, as
// kube-controller-manager's delegated authentication and authorization do.
var reviewRetryBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// delegatedAuth is who a request comes from and what it may do, both asked of the
// API server, as kube-controller-manager does for its endpoint.
type delegatedAuth struct {
	authenticator authenticator.Request
	authorizer    authorizer.Authorizer
}

// newDelegatedAuth authenticates a request by its client certificate, if the
// cluster's client CA signed it, or by its bearer token, with a TokenReview, and
// decides with a SubjectAccessReview on the request's path and verb (get, put),
// with k8s.io/apiserver's delegating authenticator and authorizer. A request
// with neither is anonymous on the probe paths only, which are allowed to
// anyone, and unauthorized (401) anywhere else. The client CA is read from the
// API server's authentication ConfigMap, and followed, until ctx ends; until it
// is read, or if it cannot be, no certificate is accepted.
func newDelegatedAuth(ctx context.Context, kubeconfig string) (*delegatedAuth, error) {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "attachdetach-controller/" + version.Version + " (delegated-auth)"
	// The reviews are cached; these limits, kube-controller-manager's for the same
	// reviews, only bound a burst of new tokens.
	cfg.QPS, cfg.Burst = 200, 400
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the client for the endpoint's reviews: %w", err)
	}
	anonymous := make([]apiserver.AnonymousAuthCondition, 0, len(probePaths))
	for _, p := range probePaths {
		anonymous = append(anonymous, apiserver.AnonymousAuthCondition{Path: p})
	}
	clientCA, err := dynamiccertificates.NewDynamicCAFromConfigMapController("client-ca",
		authenticationConfigMapNamespace, authenticationConfigMapName, clientCAKey, client)
	if err != nil {
		return nil, fmt.Errorf("following the cluster's client CA: %w", err)
	}
	go clientCA.Run(ctx, 1)
	backoff := reviewRetryBackoff
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                          &apiserver.AnonymousAuthConfig{Enabled: true, Conditions: anonymous},
		ClientCertificateCAContentProvider: clientCA,
		TokenAccessReviewClient:            client.AuthenticationV1(),
		TokenAccessReviewTimeout:           10 * time.Second,
		CacheTTL:                           delegatedAuthCacheTTL,
		WebhookRetryBackoff:                &backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("setting up delegated authentication: %w", err)
	}
	reviews, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client.AuthorizationV1(),
		AllowCacheTTL:             delegatedAuthCacheTTL,
		DenyCacheTTL:              delegatedAuthCacheTTL,
		WebhookRetryBackoff:       &backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("setting up delegated authorization: %w", err)
	}
	probes, err := path.NewAuthorizer(probePaths)
	if err != nil {
		return nil, fmt.Errorf("allowing the probe paths: %w", err)
	}
	authz, err := union.New(
		union.NamedAuthorizer{AuthorizerName: "privileged-groups", Authorizer: authorizerfactory.NewPrivilegedGroups(privilegedGroups...)},
		union.NamedAuthorizer{AuthorizerName: "probe-paths", Authorizer: probes},
		union.NamedAuthorizer{AuthorizerName: "subject-access-review", Authorizer: reviews},
	)
	if err != nil {
		return nil, fmt.Errorf("setting up delegated authorization: %w", err)
	}
	return &delegatedAuth{authenticator: authn, authorizer: authz}, nil
}

// wrap lets through to handler only the requests the API server authenticates
// and authorizes: get (put for a PUT) on the request's path, a non-resource URL.
// The token is not passed on.
func (a *delegatedAuth) wrap(handler http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logger := klog.FromContext(r.Context())
		resp, ok, err := a.authenticator.AuthenticateRequest(r)
		if err != nil || !ok {
			if err != nil {
				logger.V(2).Info("Request not authenticated", "path", r.URL.Path, "from", r.RemoteAddr, "err", err)
			}
			http.Error(w, "Unauthorized: send a bearer token the API server accepts, or a client certificate its client CA signed", http.StatusUnauthorized)
			return
		}
		attrs := authorizer.AttributesRecord{User: resp.User, Verb: strings.ToLower(r.Method), Path: r.URL.Path}
		decision, reason, err := a.authorizer.Authorize(r.Context(), attrs)
		if decision != authorizer.DecisionAllow {
			if err != nil {
				logger.Error(err, "Authorizing a request", "user", resp.User.GetName(), "path", r.URL.Path)
			}
			http.Error(w, fmt.Sprintf("Forbidden: user %q cannot %s path %q: %s", resp.User.GetName(), attrs.Verb, r.URL.Path, reason), http.StatusForbidden)
			return
		}
		r.Header.Del("Authorization")
		handler.ServeHTTP(w, r)
	})
}

// serveSecure serves handler over HTTPS on ln, with the certificate and key in
// the files, reread when they change, or with a self-signed certificate
// generated in memory when both are empty, until ctx ends; done is closed once
// the server has stopped.
func serveSecure(ctx context.Context, ln net.Listener, certFile, keyFile string, handler http.Handler) (done <-chan struct{}, err error) {
	getCertificate, err := servingCertificate(ctx, certFile, keyFile)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		// A client certificate is asked for, not required: the authenticator
		// checks it against the cluster's client CA, and a client without one
		// sends a token.
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCertificate, ClientAuth: tls.RequestClientCert},
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "HTTPS server stopped")
		}
	}()
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	klog.FromContext(ctx).Info("Serving probes and metrics", "address", ln.Addr().String(), "scheme", "https", "selfSignedCertificate", certFile == "")
	return stopped, nil
}

// servingCertificate returns the endpoint's certificate for each handshake: the
// one in the files as they are now, or one generated once.
func servingCertificate(ctx context.Context, certFile, keyFile string) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), error) {
	if certFile == "" {
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.IPv4(127, 0, 0, 1)}, []string{"localhost"})
		if err != nil {
			return nil, fmt.Errorf("generating the endpoint's certificate: %w", err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("loading the generated certificate: %w", err)
		}
		return func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }, nil
	}
	files, err := dynamiccertificates.NewDynamicServingContentFromFiles("http-endpoint", certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading --tls-cert-file and --tls-private-key-file: %w", err)
	}
	go files.Run(ctx, 1)
	return func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		cert, err := tls.X509KeyPair(files.CurrentCertKeyContent())
		if err != nil {
			return nil, fmt.Errorf("loading --tls-cert-file and --tls-private-key-file: %w", err)
		}
		return &cert, nil
	}, nil
}
