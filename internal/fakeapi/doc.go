// Package fakeapi is a small in-memory Kubernetes API server for simulations: a
// store of typed objects with resource versions, finalizers and graceful deletion,
// an event log that watches replay from any resource version, and per-caller
// clientsets (client-go's fake clientset with this store behind its reactors).
//
// Every write applied to the store, by anyone, is reported synchronously to the
// store's observer while the store is locked, so a checker sees each state the API
// ever had and can compare it with state kept outside the API (what a simulated
// kubelet has mounted).
//
// A Client can inject faults on the mutating requests it serves (errors before or
// after a write is applied, delays, a crash of its caller at the instant a write is
// applied) and on the watch events it delivers (delays, clean ends that resume,
// drops that end with 410 Gone so that the informer relists). A Client can be fenced:
// from then on nothing it sends is applied, so a killed controller's goroutines
// cannot write after the kill.
//
// Supported resources are those an attach/detach controller and the simulated
// world around it use: pods, nodes, persistentvolumes, persistentvolumeclaims,
// csidrivers, csinodes and volumeattachments. Label and field selectors are not
// supported.
package fakeapi
