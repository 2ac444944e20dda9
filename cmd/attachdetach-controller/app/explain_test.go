package app

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
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
