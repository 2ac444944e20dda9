// Package sim simulates the components around the attach/detach controller that only
// read and write API objects: kubelet's side of the attach/detach contract (Node
// objects, their Ready condition and status.volumesInUse, what it has mounted,
// optionally pod status) and the CSI external-attacher (VolumeAttachment
// finalizers and status). Tests, the local demo and the benchmark run them
// against a real API server, the simulation (internal/simworld) against fakeapi.
//
// Each simulator runs until the context passed to its Start function is
// cancelled, on a client made from the rest.Config it is given (so that a test
// can give it one without client-side rate limit), or on the caller's client
// (StartKubeletOn, StartAttacherOn).
package sim
