package metrics

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/version"
)

func TestBuildInfoIsOneWithTheVersionCommitAndGoVersion(t *testing.T) {
	oldVersion, oldCommit := version.Version, version.GitCommit
	t.Cleanup(func() { version.Version, version.GitCommit = oldVersion, oldCommit })
	version.Version, version.GitCommit = "v9.8.7", "0123456789abcdef0123456789abcdef01234567"

	m := New()
	want := fmt.Sprintf(`
# HELP attachdetach_controller_build_info Always 1, labelled with the version, the git commit and the Go version the controller was built from.
# TYPE attachdetach_controller_build_info gauge
attachdetach_controller_build_info{git_commit="0123456789abcdef0123456789abcdef01234567",go_version=%q,version="v9.8.7"} 1
`, runtime.Version())
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "attachdetach_controller_build_info"); err != nil {
		t.Error(err)
	}
}
