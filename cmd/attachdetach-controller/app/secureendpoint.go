package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericfilters "k8s.io/apiserver/pkg/endpoints/filters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/version"
)

// probePaths answer without a token: kubelet's probes carry none.
var probePaths = []string{"/healthz", "/readyz", "/livez"}

// delegatedAuthCacheTTL is how long an answer of the API server about a token or
// a permission is reused, so that a scrape every few seconds costs one review
// per period, not one per scrape.
const delegatedAuthCacheTTL = 10 * time.Second

// delegatedAuth is who a request comes from and what it may do, both asked of the
// API server, as kube-controller-manager does for its endpoint.
type delegatedAuth struct {
	authenticator authenticator.Request
	authorizer    authorizer.Authorizer
}

// newDelegatedAuth reads a request's bearer token with a TokenReview and decides
// with a SubjectAccessReview on the request's path and verb (get, put). A request
// without a token is anonymous on the probe paths only, which are allowed to
// anyone, and unauthorized (401) anywhere else.
//
// The authenticator is made from k8s.io/apiserver's factory rather than its
// DelegatingAuthenticationOptions, whose ApplyTo makes every request without a
// token anonymous: /metrics would then answer 403 to no token at all.
func newDelegatedAuth(kubeconfig string) (*delegatedAuth, error) {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "attachdetach-controller/" + version.Version + " (delegated-auth)"
	// The reviews are cached; these limits, those of the authorization options,
	// only bound a burst of new tokens.
	cfg.QPS, cfg.Burst = 200, 400
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the client for TokenReviews: %w", err)
	}
	anonymous := make([]apiserver.AnonymousAuthCondition, 0, len(probePaths))
	for _, p := range probePaths {
		anonymous = append(anonymous, apiserver.AnonymousAuthCondition{Path: p})
	}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: true, Conditions: anonymous},
		TokenAccessReviewClient:  client.AuthenticationV1(),
		TokenAccessReviewTimeout: 10 * time.Second,
		CacheTTL:                 delegatedAuthCacheTTL,
		WebhookRetryBackoff:      options.DefaultAuthWebhookRetryBackoff(),
	}.New()
	if err != nil {
		return nil, fmt.Errorf("setting up delegated authentication: %w", err)
	}

	authzOptions := options.NewDelegatingAuthorizationOptions()
	authzOptions.RemoteKubeConfigFile = kubeconfig
	authzOptions.AllowCacheTTL, authzOptions.DenyCacheTTL = delegatedAuthCacheTTL, delegatedAuthCacheTTL
	authzOptions.AlwaysAllowPaths = probePaths
	if errs := authzOptions.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("delegated authorization: %w", errors.Join(errs...))
	}
	var authz server.AuthorizationInfo
	if err := authzOptions.ApplyTo(&authz); err != nil {
		return nil, fmt.Errorf("setting up delegated authorization: %w", err)
	}
	return &delegatedAuth{authenticator: authn, authorizer: authz.Authorizer}, nil
}

// wrap lets through to handler only the requests the API server authenticates
// and authorizes.
func (a *delegatedAuth) wrap(handler http.Handler) http.Handler {
	h := genericfilters.WithAuthorization(handler, a.authorizer, scheme.Codecs)
	h = genericfilters.WithAuthentication(h, a.authenticator, genericfilters.Unauthorized(scheme.Codecs), nil, nil)
	return genericfilters.WithRequestInfo(h, &apirequest.RequestInfoFactory{})
}

// serveSecure serves handler over HTTPS on ln, with the certificate and key in
// the files, or with a self-signed certificate generated in memory when both
// are empty, until ctx ends; done is closed once the server has stopped.
func serveSecure(ctx context.Context, ln net.Listener, certFile, keyFile string, handler http.Handler) (done <-chan struct{}, err error) {
	serving := options.NewSecureServingOptions()
	serving.Listener = ln
	serving.ServerCert.CertDirectory = ""
	serving.ServerCert.CertKey = options.CertKey{CertFile: certFile, KeyFile: keyFile}
	if err := serving.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{net.IPv4(127, 0, 0, 1)}); err != nil {
		return nil, fmt.Errorf("generating the endpoint's certificate: %w", err)
	}
	var info *server.SecureServingInfo
	if err := serving.ApplyTo(&info); err != nil {
		return nil, fmt.Errorf("setting up HTTPS on --http-endpoint: %w", err)
	}
	stopped, _, err := info.Serve(handler, 5*time.Second, ctx.Done())
	if err != nil {
		return nil, fmt.Errorf("serving HTTPS on --http-endpoint: %w", err)
	}
	klog.FromContext(ctx).Info("Serving probes and metrics", "address", ln.Addr().String(), "scheme", "https", "selfSignedCertificate", certFile == "")
	return stopped, nil
}
