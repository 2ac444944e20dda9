// Package killproxy is a loopback HTTP reverse proxy in front of a kube-apiserver for
// crash tests. The process under test talks plain http to the proxy without
// credentials; the proxy forwards everything (watches included, streamed) with the
// credentials of its upstream configuration. It numbers the writes it sees and, when
// told to kill after write N, lets write N complete, holds write N+1, calls the test's
// kill function (which SIGKILLs the process under test) and then fails the held
// request, so the API server never sees it.
package killproxy
