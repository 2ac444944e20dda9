package version

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestStringNamesTheVersionCommitAndGoVersion(t *testing.T) {
	oldVersion, oldCommit := Version, GitCommit
	t.Cleanup(func() { Version, GitCommit = oldVersion, oldCommit })

	Version, GitCommit = "v1.2.3", "0123456789abcdef"
	s := String()
	if !strings.HasPrefix(s, "attachdetach-controller v1.2.3 ") {
		t.Errorf("String() = %q, want the version after the program name", s)
	}
	for _, want := range []string{"commit 0123456789abcdef", runtime.Version()} {
		if !strings.Contains(s, want) {
			t.Errorf("String() = %q, want %q in it", s, want)
		}
	}
}

func TestCommitPrefersTheLinkerValue(t *testing.T) {
	old := GitCommit
	t.Cleanup(func() { GitCommit = old })

	GitCommit = "fedcba9876543210"
	if got := Commit(); got != "fedcba9876543210" {
		t.Errorf("Commit() = %q, want the value set at link time", got)
	}
}

func TestCommitOfReadsTheStampedRevision(t *testing.T) {
	for _, c := range []struct {
		name     string
		settings []debug.BuildSetting
		want     string
	}{
		{"a clean checkout", []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "false"}}, "abc123"},
		{"a checkout with changes", []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}, "abc123-dirty"},
		{"a build without VCS stamping", []debug.BuildSetting{{Key: "-trimpath", Value: "true"}}, "unknown"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := commitOf(c.settings); got != c.want {
				t.Errorf("commitOf(%v) = %q, want %q", c.settings, got, c.want)
			}
		})
	}
}
