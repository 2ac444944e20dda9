package testenv

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

// writeAuditPolicy writes an audit policy that records requests of the given users at
// Metadata level, once each (from the stage the response starts or completes), and
// nothing else.
func writeAuditPolicy(path string, users []string) error {
	quoted := make([]string, len(users))
	for i, u := range users {
		quoted[i] = fmt.Sprintf("%q", u)
	}
	policy := fmt.Sprintf(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: [%s]
- level: None
`, strings.Join(quoted, ", "))
	if err := os.WriteFile(path, []byte(policy), 0o600); err != nil {
		return fmt.Errorf("writing audit policy: %w", err)
	}
	return nil
}

// credentialIDKey is the user "extra" key under which the API server records which
// credential authenticated a request.
const credentialIDKey = "authentication.kubernetes.io/credential-id"

// AuditEvent is one request from the audit log.
type AuditEvent struct {
	AuditID     string
	User        string
	UserAgent   string
	Verb        string
	APIGroup    string
	Resource    string
	Subresource string
	Namespace   string
	Name        string
	Code        int
	Received    time.Time

	// CredentialID tells which credential of the user authenticated the request, if
	// the API server records it: "JTI=<the token's jti claim>" for a ServiceAccount
	// token.
	CredentialID string
}

// auditLine is the part of an audit.k8s.io/v1 Event this package reads.
type auditLine struct {
	AuditID string `json:"auditID"`
	Verb    string `json:"verb"`
	User    struct {
		Username string              `json:"username"`
		Extra    map[string][]string `json:"extra"`
	} `json:"user"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
}

// ReadAuditLog parses a JSON audit log. A request logged at several stages (a watch
// logs when its response starts and when it ends) is returned once, with the last
// stage's response code.
func ReadAuditLog(path string) ([]AuditEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening audit log: %w", err)
	}
	defer f.Close()
	var events []AuditEvent
	index := map[string]int{}
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	// A bad last line is one the API server is writing right now: it is skipped.
	var badLine error
	for lineNo := 1; scanner.Scan(); lineNo++ {
		if badLine != nil {
			return nil, badLine
		}
		var line auditLine
		if err := json.Unmarshal(scanner.Bytes(), &line); err != nil {
			badLine = fmt.Errorf("audit log %s line %d: %w", path, lineNo, err)
			continue
		}
		ev := AuditEvent{
			AuditID:   line.AuditID,
			User:      line.User.Username,
			UserAgent: line.UserAgent,
			Verb:      line.Verb,
			Received:  line.RequestReceivedTimestamp,
		}
		if ids := line.User.Extra[credentialIDKey]; len(ids) > 0 {
			ev.CredentialID = ids[0]
		}
		if r := line.ObjectRef; r != nil {
			ev.APIGroup, ev.Resource, ev.Subresource, ev.Namespace, ev.Name = r.APIGroup, r.Resource, r.Subresource, r.Namespace, r.Name
		}
		if line.ResponseStatus != nil {
			ev.Code = line.ResponseStatus.Code
		}
		if i, seen := index[ev.AuditID]; seen {
			events[i].Code = ev.Code
			continue
		}
		index[ev.AuditID] = len(events)
		events = append(events, ev)
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("reading audit log %s: %w", path, err)
	}
	return events, nil
}

// RequestKey groups requests for counting.
type RequestKey struct {
	User     string
	Verb     string
	Resource string // "resource" or "resource/subresource"; empty for non-resource URLs
}

func (k RequestKey) String() string {
	return k.User + " " + k.Verb + " " + k.Resource
}

// RequestCounts counts requests by user, verb and resource/subresource.
type RequestCounts map[RequestKey]int

// CountRequests counts events by user, verb and resource/subresource.
func CountRequests(events []AuditEvent) RequestCounts {
	counts := RequestCounts{}
	for _, ev := range events {
		resource := ev.Resource
		if ev.Subresource != "" {
			resource += "/" + ev.Subresource
		}
		counts[RequestKey{User: ev.User, Verb: ev.Verb, Resource: resource}]++
	}
	return counts
}

// Total returns the number of requests counted.
func (c RequestCounts) Total() int {
	total := 0
	for _, n := range c {
		total += n
	}
	return total
}

// String lists the counts one per line, sorted, for test reports.
func (c RequestCounts) String() string {
	keys := slices.SortedFunc(maps.Keys(c), func(a, b RequestKey) int { return strings.Compare(a.String(), b.String()) })
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%6d %s\n", c[k], k)
	}
	return b.String()
}

// AuditEvents reads the environment's audit log; it fails without Options.AuditUsers.
func (e *Env) AuditEvents() ([]AuditEvent, error) {
	if e.AuditLog == "" {
		return nil, fmt.Errorf("audit log not enabled: set Options.AuditUsers")
	}
	return ReadAuditLog(e.AuditLog)
}
