// Package sim simulates the components around the attach/detach controller that only
// read and write API objects: kubelet's side of the attach/detach contract (Node
// objects, their Ready condition and status.volumesInUse, optionally pod status) and
// the CSI external-attacher (VolumeAttachment finalizers and status). Tests, the local
// demo and the benchmark run them against a real API server.
//
// Each simulator makes its own client from the rest.Config it is given, so a test can
// give it a configuration without client-side rate limit, and runs until the context
// passed to its Start function is cancelled.
package sim
