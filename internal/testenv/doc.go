// Package testenv runs a throw-away Kubernetes control plane on loopback for tests,
// the local demo and the benchmark: a real etcd and a real kube-apiserver with RBAC,
// static-token users, ServiceAccount token signing and optional audit logging.
//
// One control plane per test package is the intended use:
//
//	var env *testenv.Env
//
//	func TestMain(m *testing.M) {
//		os.Exit(testenv.Main(m, testenv.Options{}, func(e *testenv.Env) { env = e }))
//	}
//
// Tests then isolate themselves by namespace or by unique object names.
package testenv
