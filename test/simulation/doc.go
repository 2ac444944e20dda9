// Package simulation runs the attach/detach controller, through its public entry
// point (controller.New and Run), against a simulated cluster in memory, one random
// world per seed, with faults injected, and checks the safety rules after every
// write and convergence at the end of each seed.
//
//	go test ./test/simulation                          # 2,000 seeds (CI)
//	go test ./test/simulation -short                   # 200 seeds
//	go test ./test/simulation -seeds=100000 -timeout=0 # soak
//	go test ./test/simulation -run TestSimulation -seed=1234 -v
//
// A seed runs inside a testing/synctest bubble: time is simulated (a seed covers
// several minutes of cluster time in a fraction of a second) and advances only
// when every goroutine is blocked. The world (workload, kubelets, external-attacher,
// pod garbage collection, controller kills at set times) runs on one goroutine and
// draws every choice from the seed, waiting before each step until the controller
// has nothing left to do at that instant; faults are drawn from a hash of the seed
// and the identity of each request or watch event, not from the order requests
// arrive in. What is not reproducible is the order in which the controller's own
// goroutines run within one instant (several workers, informers, the status
// updater): a seed that fails because of such a race may need a few runs, or
// -count, to fail again, and its trace may differ in detail.
//
// A failing seed prints the violation, the last lines of its trace (world steps,
// every write applied to the API and by whom, every fault, the controller's log)
// and the command that runs it again.
package simulation
