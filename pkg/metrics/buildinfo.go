package metrics

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/version"
)

// buildInfo is attachdetach_controller_build_info: always 1, labelled with the
// release, the commit and the Go version the binary was built from, so that a
// query can tell which build each replica runs (and join it onto other series).
func buildInfo() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help: "Always 1, labelled with the version, the git commit and the Go version the controller was built from.",
		ConstLabels: prometheus.Labels{
			"version":    version.Version,
			"git_commit": version.Commit(),
			"go_version": runtime.Version(),
		},
	})
	g.Set(1)
	return g
}
