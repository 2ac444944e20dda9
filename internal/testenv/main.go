package testenv

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// mainStartTimeout bounds Main's start-up, including a first build of kube-apiserver.
const mainStartTimeout = 30 * time.Minute

// Main runs a test package's tests against one control plane shared by all of them:
// it starts the control plane, hands it to set, runs the tests and stops it, keeping
// the logs when a test failed. Call it from TestMain:
//
//	os.Exit(testenv.Main(m, testenv.Options{}, func(e *testenv.Env) { env = e }))
func Main(m *testing.M, opts Options, set func(*Env)) int {
	ctx, cancel := context.WithTimeout(context.Background(), mainStartTimeout)
	env, err := Start(ctx, opts)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		return 1
	}
	set(env)
	code := m.Run()
	if code != 0 {
		env.KeepLogs()
	}
	env.Stop()
	return code
}

// StartForTest starts a control plane private to one test, stopped when the test ends
// (keeping the logs if it failed).
func StartForTest(t testing.TB, opts Options) *Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), mainStartTimeout)
	defer cancel()
	env, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("starting control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			env.KeepLogs()
		}
		env.Stop()
	})
	return env
}
