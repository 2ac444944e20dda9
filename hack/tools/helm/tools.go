//go:build tools

// Package tools pins helm, which packages the chart in charts/ for a release and
// lints and renders it in the tests.
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
