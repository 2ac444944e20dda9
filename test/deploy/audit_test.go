package deploy

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// credentialID returns the credential ID the API server records for requests made
// with a ServiceAccount token (a JWT), read from its jti claim.
func credentialID(token string) (string, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", errors.New("token is not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", fmt.Errorf("decoding token payload: %w", err)
	}
	var claims struct {
		JTI string `json:"jti"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return "", fmt.Errorf("parsing token claims: %w", err)
	}
	if claims.JTI == "" {
		return "", errors.New("token has no jti claim")
	}
	return "JTI=" + claims.JTI, nil
}

// request is one API request, from the audit log.
type request struct {
	// credential is the credential ID of the token the request was made with: every
	// replica has a token of its own, so it tells replicas of one ServiceAccount apart.
	credential string
	verb       string
	permission permission
	namespace  string
	name       string
	code       int
	received   time.Time
}

// isWrite tells whether the request changes something.
func (r request) isWrite() bool {
	if reviews[r.permission.Group+"/"+r.permission.Resource] {
		return false
	}
	switch r.verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// reviews are created to ask the API server a question, and stored nowhere: every
// replica, standby or not, asks who scrapes its endpoint and whether it may.
var reviews = map[string]bool{
	"authentication.k8s.io/tokenreviews":        true,
	"authorization.k8s.io/subjectaccessreviews": true,
}

func (r request) String() string {
	return fmt.Sprintf("%s %s %s/%s -> %d at %s", r.credential, r.permission, r.namespace, r.name, r.code, r.received.Format(time.StampMicro))
}

// auditedRequests reads the requests of the audited users (the controller's
// ServiceAccount) from the audit log, in the order they were received.
func auditedRequests() ([]request, error) {
	events, err := env.AuditEvents()
	if err != nil {
		return nil, err
	}
	requests := make([]request, len(events))
	for i, ev := range events {
		r := request{credential: ev.CredentialID, verb: ev.Verb, namespace: ev.Namespace, name: ev.Name, code: ev.Code, received: ev.Received}
		if ev.Resource != "" {
			resource := ev.Resource
			if ev.Subresource != "" {
				resource += "/" + ev.Subresource
			}
			r.permission = permission{Group: ev.APIGroup, Resource: resource, Verb: ev.Verb}
		}
		requests[i] = r
	}
	slices.SortStableFunc(requests, func(a, b request) int { return a.received.Compare(b.received) })
	return requests, nil
}

// requestsOf returns the requests made with the given credentials.
func requestsOf(all []request, credentials ...string) []request {
	return slices.DeleteFunc(slices.Clone(all), func(r request) bool { return !slices.Contains(credentials, r.credential) })
}
