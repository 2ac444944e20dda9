package app

import (
	"fmt"
	"net/http"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
)

// readOnly refuses every request that is not a read, so that explaining, or
// running in shadow mode, can never change the cluster, whatever the
// credentials allow.
type readOnly struct{ next http.RoundTripper }

func (r readOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		return nil, fmt.Errorf("read-only client: refusing %s %s", req.Method, req.URL.Path)
	}
	return r.next.RoundTrip(req)
}

// discardEvents is the event recorder of a controller that only explains or
// shadows.
type discardEvents struct{}

var _ record.EventRecorder = discardEvents{}

func (discardEvents) Event(object runtime.Object, eventtype, reason, message string) {}
func (discardEvents) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
}
func (discardEvents) AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
}
