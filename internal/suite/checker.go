package suite

import (
	"context"
	"strings"
	"testing"

	"github.com/attachdetach-controller/attachdetach-controller/internal/invariant"
	"github.com/attachdetach-controller/attachdetach-controller/internal/testenv"
)

// StartChecker starts the invariant checker on a control plane. When the test ends
// (after a World's clean-up, if started before the World's controller) it stops the
// checker and fails the test with every violation found.
func StartChecker(t testing.TB, env *testenv.Env) *invariant.Checker {
	t.Helper()
	checker, err := invariant.Start(context.Background(), env.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		checker.Stop()
		if violations := checker.Violations(); len(violations) > 0 {
			t.Errorf("invariants violated:\n%s", strings.Join(violations, "\n"))
		}
	})
	return checker
}
