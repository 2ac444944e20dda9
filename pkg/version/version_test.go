package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	old := Version
	t.Cleanup(func() { Version = old })

	Version = "v1.2.3"
	s := String()
	if !strings.HasPrefix(s, "attachdetach-controller v1.2.3 ") {
		t.Errorf("String() = %q, want the version after the program name", s)
	}
	if !strings.Contains(s, runtime.Version()) {
		t.Errorf("String() = %q, want the Go version in it", s)
	}
}
