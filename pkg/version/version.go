// Package version holds the version of the controller binary. Release builds set it
// at link time:
//
//	go build -ldflags "-X github.com/attachdetach-controller/attachdetach-controller/pkg/version.Version=v0.1.0" ./cmd/attachdetach-controller
package version

import (
	"fmt"
	"runtime"
)

// Version is the release this binary was built from. It is "dev" unless the linker
// sets it (see the package comment and the Dockerfile).
var Version = "dev"

// String describes the binary for --version output and the start-up log line, for
// example "attachdetach-controller v0.1.0 (go1.26.0 linux/amd64)".
func String() string {
	return fmt.Sprintf("attachdetach-controller %s (%s %s/%s)", Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
