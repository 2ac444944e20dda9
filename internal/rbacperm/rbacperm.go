// Package rbacperm expands RBAC rules into the single permissions they grant, so
// that tests can hold a request against the project's roles.
package rbacperm

import (
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
)

// Permission is one verb on one resource ("resource" or "resource/subresource")
// of an API group ("" for the core group).
type Permission struct {
	Group, Resource, Verb string
}

func (p Permission) String() string {
	group := p.Group
	if group == "" {
		group = "core"
	}
	return fmt.Sprintf("%s %s/%s", p.Verb, group, p.Resource)
}

// Of expands RBAC rules into the permissions they grant.
func Of(rules []rbacv1.PolicyRule) map[Permission]bool {
	granted := map[Permission]bool{}
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					granted[Permission{Group: g, Resource: res, Verb: v}] = true
				}
			}
		}
	}
	return granted
}
