//go:build tools

// Package tools pins promtool, which checks the Prometheus rules under
// manifests/ in the tests.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
