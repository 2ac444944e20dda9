// Package killproxy is a loopback HTTP reverse proxy in front of a kube-apiserver for
// crash and fault tests. The process under test talks plain http to the proxy without
// credentials; the proxy forwards everything (watches included, streamed) with the
// credentials of its upstream configuration.
//
// Crashes: it numbers the writes it sees and, when told to kill after write N, lets
// write N complete, holds write N+1, calls the test's kill function (which SIGKILLs
// the process under test) and then fails the held request, so the API server never
// sees it.
//
// Faults: a Rule, seeded random (Random) or scripted (Script), chooses for each request
// whether to delay it, fail it before forwarding (500, or 429 with Retry-After), reset
// its connection, or forward it and reset the connection instead of answering (the
// write happened, the client cannot know). CutConnections resets the connections of
// open requests such as watches; Partition resets every connection and refuses new
// ones until Restore. Every write is recorded with what became of it and when it was
// forwarded.
package killproxy
