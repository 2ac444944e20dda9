package killproxy

import (
	"net/http"
	"slices"
	"strings"
)

// RequestInfo is what a request is about, parsed from its URL path.
type RequestInfo struct {
	Group, Version, Namespace, Resource, Name, Subresource string
}

// ParseRequest reads the API group, namespace, resource, name and subresource from a
// Kubernetes API path (/api/v1/... or /apis/<group>/<version>/...). Other paths give
// an empty RequestInfo.
func ParseRequest(path string) RequestInfo {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var info RequestInfo
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		info.Version, parts = parts[1], parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		info.Group, info.Version, parts = parts[1], parts[2], parts[3:]
	default:
		return RequestInfo{}
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		info.Namespace, parts = parts[1], parts[2:]
	}
	fields := []*string{&info.Resource, &info.Name, &info.Subresource}
	for i := 0; i < len(parts) && i < len(fields); i++ {
		*fields[i] = parts[i]
	}
	if info.Resource == "namespaces" && info.Namespace == "" {
		info.Namespace = info.Name
	}
	return info
}

// IsWrite tells whether a request changes state: POST, PUT, PATCH or DELETE.
func IsWrite(r *http.Request) bool {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// IsWatch tells whether a request is a watch.
func IsWatch(r *http.Request) bool {
	w := r.URL.Query().Get("watch")
	return w == "true" || w == "1"
}

// ExcludeResources returns a write filter that counts every mutating request except
// those on the named resources (in any API group), e.g. "events", "leases".
func ExcludeResources(resources ...string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		return !slices.Contains(resources, ParseRequest(r.URL.Path).Resource)
	}
}
