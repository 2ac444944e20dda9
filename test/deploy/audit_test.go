package deploy

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// credentialIDKey is the user "extra" key under which the API server records which
// token authenticated a request: "JTI=<the token's jti claim>" for ServiceAccount
// tokens. Every replica process gets a token of its own, so this tells replicas of
// one ServiceAccount apart.
const credentialIDKey = "authentication.kubernetes.io/credential-id"

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
	auditID    string
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
	switch r.verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

func (r request) String() string {
	return fmt.Sprintf("%s %s %s/%s -> %d at %s", r.credential, r.permission, r.namespace, r.name, r.code, r.received.Format(time.StampMicro))
}

// auditLine is the part of an audit.k8s.io/v1 Event this package reads.
type auditLine struct {
	AuditID string `json:"auditID"`
	Verb    string `json:"verb"`
	User    struct {
		Extra map[string][]string `json:"extra"`
	} `json:"user"`
	ObjectRef *struct {
		APIGroup    string `json:"apiGroup"`
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
}

// auditedRequests reads the requests of the audited users (the controller's
// ServiceAccount) from the audit log, in the order they were received. A request
// logged at several stages (a watch, when its response starts and when it ends) is
// returned once, with the last stage's response code.
func auditedRequests() ([]request, error) {
	f, err := os.Open(env.AuditLog)
	if err != nil {
		return nil, fmt.Errorf("opening audit log: %w", err)
	}
	defer f.Close()
	var requests []request
	index := map[string]int{}
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	// Only the last line may be incomplete: the API server may be writing it.
	var badLine error
	for lineNo := 1; scanner.Scan(); lineNo++ {
		if badLine != nil {
			return nil, badLine
		}
		var line auditLine
		if err := json.Unmarshal(scanner.Bytes(), &line); err != nil {
			badLine = fmt.Errorf("audit log line %d: %w", lineNo, err)
			continue
		}
		r := request{auditID: line.AuditID, verb: line.Verb, received: line.RequestReceivedTimestamp}
		if ids := line.User.Extra[credentialIDKey]; len(ids) > 0 {
			r.credential = ids[0]
		}
		if o := line.ObjectRef; o != nil {
			resource := o.Resource
			if o.Subresource != "" {
				resource += "/" + o.Subresource
			}
			r.permission = permission{group: o.APIGroup, resource: resource, verb: line.Verb}
			r.namespace, r.name = o.Namespace, o.Name
		}
		if line.ResponseStatus != nil {
			r.code = line.ResponseStatus.Code
		}
		if i, seen := index[r.auditID]; seen {
			requests[i].code = r.code
			continue
		}
		index[r.auditID] = len(requests)
		requests = append(requests, r)
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("reading audit log: %w", err)
	}
	slices.SortStableFunc(requests, func(a, b request) int { return a.received.Compare(b.received) })
	return requests, nil
}

// requestsOf returns the requests made with the given credentials.
func requestsOf(all []request, credentials ...string) []request {
	return slices.DeleteFunc(slices.Clone(all), func(r request) bool { return !slices.Contains(credentials, r.credential) })
}
