//go:build tools

// Package tools pins the upstream Kubernetes commands that the tests and
// benchmarks run: kube-apiserver, kube-controller-manager and kubectl.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
