package app

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/flowcontrol"
)

// TestKubeAPIContentType: every request and watch of a client made from the
// command's configuration is sent in the --kube-api-content-type encoding and
// asks for it back.
func TestKubeAPIContentType(t *testing.T) {
	for _, tc := range []struct {
		contentType, wantAccept string
	}{
		{"application/vnd.kubernetes.protobuf", "application/vnd.kubernetes.protobuf,application/json"},
		{"application/json", "application/json"},
	} {
		t.Run(tc.contentType, func(t *testing.T) {
			var mu sync.Mutex
			seen := map[string]http.Header{}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				seen[r.Method+" "+r.URL.Query().Get("watch")] = r.Header.Clone()
				mu.Unlock()
				http.Error(w, "no API here", http.StatusServiceUnavailable)
			}))
			defer srv.Close()
			kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
			err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+srv.URL+`"}}]
users: [{name: u, user: {}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600)
			if err != nil {
				t.Fatal(err)
			}
			o, err := ParseFlags([]string{"--kubeconfig=" + kubeconfig, "--kube-api-content-type=" + tc.contentType}, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			base, err := clientConfig(o)
			if err != nil {
				t.Fatal(err)
			}
			client, err := newClient(base, "api", flowcontrol.NewFakeAlwaysRateLimiter())
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			_, _ = client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			_, _ = client.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{})
			_, _ = client.CoreV1().Events("ns").Create(ctx, &v1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e"}}, metav1.CreateOptions{})
			mu.Lock()
			defer mu.Unlock()
			for _, req := range []string{"GET ", "GET true", "POST "} {
				h, ok := seen[req]
				if !ok {
					t.Errorf("no %q request reached the server; saw %v", req, seen)
					continue
				}
				if got := h.Get("Accept"); !strings.HasPrefix(got, tc.wantAccept) {
					t.Errorf("%s: Accept = %q, want %q", req, got, tc.wantAccept)
				}
			}
			if got := seen["POST "].Get("Content-Type"); got != tc.contentType {
				t.Errorf("POST: Content-Type = %q, want %q", got, tc.contentType)
			}
		})
	}
}
