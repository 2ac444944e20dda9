// Package version holds the version of the controller binary and the commit it was
// built from. Release builds set both at link time:
//
//	go build -ldflags "-X github.com/attachdetach-controller/attachdetach-controller/pkg/version.Version=v0.1.0 \
//	  -X github.com/attachdetach-controller/attachdetach-controller/pkg/version.GitCommit=$(git rev-parse HEAD)" \
//	  ./cmd/attachdetach-controller
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the release this binary was built from. It is "dev" unless the linker
// sets it (see the package comment and the Dockerfile).
var Version = "dev"

// GitCommit is the commit this binary was built from, when the linker sets it;
// Commit falls back to what the Go toolchain stamped into the binary.
var GitCommit = ""

// Commit returns the commit the binary was built from: GitCommit if the linker set
// it, else the revision `go build` stamped from the checkout (vcs.revision, with
// "-dirty" when the checkout had changes), else "unknown".
func Commit() string {
	if GitCommit != "" {
		return GitCommit
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return commitOf(info.Settings)
}

// commitOf reads the revision from the build settings go build records.
func commitOf(settings []debug.BuildSetting) string {
	var revision, modified string
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	switch {
	case revision == "":
		return "unknown"
	case modified == "true":
		return revision + "-dirty"
	default:
		return revision
	}
}

// String describes the binary for --version output and the start-up log line, for
// example "attachdetach-controller v0.1.0 (commit 0123abc..., go1.26.0 linux/amd64)".
func String() string {
	return fmt.Sprintf("attachdetach-controller %s (commit %s, %s %s/%s)", Version, Commit(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
