package app

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/explain"
)

// TestLeaderGetSendsTheUsersCredentials: explain asks the leader with the
// user's own credentials, a bearer token or a client certificate, as it would
// send them to the API server, whatever CA the kubeconfig names for the API
// server (the leader's certificate is not the API server's).
func TestLeaderGetSendsTheUsersCredentials(t *testing.T) {
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("user", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var gotToken string
	var gotCerts int
	leader := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotToken, gotCerts = r.Header.Get("Authorization"), len(r.TLS.PeerCertificates)
		_, _ = w.Write([]byte("{}"))
	}))
	leader.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	leader.StartTLS()
	defer leader.Close()
	apiServerCA, _, err := certutil.GenerateSelfSignedCertKey("api-server-ca", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		config    rest.Config
		wantToken string
		wantCert  bool
	}{
		{"a bearer token", rest.Config{BearerToken: "t0k3n", TLSClientConfig: rest.TLSClientConfig{CAData: apiServerCA}}, "Bearer t0k3n", false},
		{"a client certificate", rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: apiServerCA, CertData: certPEM, KeyData: keyPEM}}, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			gotToken, gotCerts = "", 0
			if _, err := leaderGet(t.Context(), &c.config, leader.URL+ExplainPath); err != nil {
				t.Fatal(err)
			}
			if gotToken != c.wantToken {
				t.Errorf("Authorization = %q, want %q", gotToken, c.wantToken)
			}
			if (gotCerts > 0) != c.wantCert {
				t.Errorf("the leader got %d client certificates, want some: %t", gotCerts, c.wantCert)
			}
		})
	}
}

// TestAskLeaderRefusesImpersonation: with --as or --as-group, explain does not
// ask the leader, which would authorize the kubeconfig's own user rather than
// the one impersonated; it reads the cluster as the impersonated user instead.
func TestAskLeaderRefusesImpersonation(t *testing.T) {
	var asked atomic.Int32
	leader := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		_, _ = w.Write([]byte("{}"))
	}))
	defer leader.Close()
	for _, c := range []struct {
		name        string
		impersonate rest.ImpersonationConfig
		wantErr     bool
	}{
		{"no impersonation", rest.ImpersonationConfig{}, false},
		{"--as", rest.ImpersonationConfig{UserName: "oncall"}, true},
		{"--as-group", rest.ImpersonationConfig{Groups: []string{"storage-oncall"}}, true},
		{"--as-uid", rest.ImpersonationConfig{UID: "1234"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := asked.Load()
			o := &ExplainOptions{LeaderURL: leader.URL, Target: explain.Target{Kind: explain.Node, Name: "node-a"}}
			_, err := askLeader(t.Context(), nil, &rest.Config{BearerToken: "t0k3n", Impersonate: c.impersonate}, o)
			if (err != nil) != c.wantErr {
				t.Fatalf("askLeader: %v, want an error: %t", err, c.wantErr)
			}
			if wantAsked := !c.wantErr; (asked.Load() > before) != wantAsked {
				t.Errorf("the leader was asked: %t, want %t", asked.Load() > before, wantAsked)
			}
		})
	}
}
