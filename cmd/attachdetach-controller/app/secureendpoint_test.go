package app

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/util/workqueue"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/metrics"
)

// TestWorkQueueMetricsStayInTheControllersRegistry: nothing the command links
// takes client-go's work queue metrics provider before the controller hooks its
// own (k8s.io/apiserver's request filters did, at init), so workqueue_adds_total
// is on the controller's /metrics.
func TestWorkQueueMetricsStayInTheControllersRegistry(t *testing.T) {
	m := metrics.New()
	m.HookClientGo()
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: "provider-test"})
	defer q.ShutDown()
	q.Add("item")
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "workqueue_adds_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == "provider-test" && s.GetCounter().GetValue() == 1 {
					return
				}
			}
		}
	}
	t.Fatal("the controller's registry has no workqueue_adds_total{name=\"provider-test\"} 1: another work queue metrics provider was set first")
}

// fixedAuthenticator authenticates every request as user, or none when user is
// nil, or fails with err.
type fixedAuthenticator struct {
	user user.Info
	err  error
}

func (a fixedAuthenticator) AuthenticateRequest(*http.Request) (*authenticator.Response, bool, error) {
	if a.user == nil || a.err != nil {
		return nil, false, a.err
	}
	return &authenticator.Response{User: a.user}, true, nil
}

// allowList allows the verb and path pairs it holds, and records what it was
// asked.
type allowList struct {
	allowed map[string]bool
	asked   []string
}

func (a *allowList) Authorize(_ context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	key := attrs.GetVerb() + " " + attrs.GetPath()
	a.asked = append(a.asked, key)
	if a.allowed[key] {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "no rule", nil
}

// TestDelegatedAuthAnswers: no identity is 401, an identity without the
// permission 403, with it the handler's answer; the verb is the method's, and
// the token is not passed on.
func TestDelegatedAuthAnswers(t *testing.T) {
	reader := &user.DefaultInfo{Name: "reader"}
	for _, c := range []struct {
		name      string
		identity  fixedAuthenticator
		method    string
		path      string
		want      int
		wantAsked string
	}{
		{name: "no token", identity: fixedAuthenticator{}, method: http.MethodGet, path: "/metrics", want: http.StatusUnauthorized},
		{name: "a token the API server refuses", identity: fixedAuthenticator{err: errors.New("token review failed")}, method: http.MethodGet, path: "/metrics", want: http.StatusUnauthorized},
		{name: "allowed get", identity: fixedAuthenticator{user: reader}, method: http.MethodGet, path: "/metrics", want: http.StatusOK, wantAsked: "get /metrics"},
		{name: "get without the permission", identity: fixedAuthenticator{user: reader}, method: http.MethodGet, path: ExplainPath, want: http.StatusForbidden, wantAsked: "get " + ExplainPath},
		{name: "put needs put", identity: fixedAuthenticator{user: reader}, method: http.MethodPut, path: "/metrics", want: http.StatusForbidden, wantAsked: "put /metrics"},
	} {
		t.Run(c.name, func(t *testing.T) {
			authz := &allowList{allowed: map[string]bool{"get /metrics": true}}
			auth := &delegatedAuth{authenticator: c.identity, authorizer: authorizer.AuthorizerFunc(authz.Authorize)}
			var forwardedToken string
			handler := auth.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				forwardedToken = r.Header.Get("Authorization")
			}))
			req := httptest.NewRequest(c.method, c.path, nil)
			req.Header.Set("Authorization", "Bearer secret")
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, req)
			if rec.Code != c.want {
				t.Errorf("%s %s = %d, want %d: %s", c.method, c.path, rec.Code, c.want, rec.Body.String())
			}
			if c.wantAsked != "" && (len(authz.asked) != 1 || authz.asked[0] != c.wantAsked) {
				t.Errorf("asked %v, want %q", authz.asked, c.wantAsked)
			}
			if forwardedToken != "" {
				t.Errorf("the handler got the token %q", forwardedToken)
			}
		})
	}
}
