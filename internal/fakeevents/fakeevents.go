// Package fakeevents reads what client-go's FakeRecorder recorded, for unit tests.
package fakeevents

import "k8s.io/client-go/tools/record"

// Drain returns, in order, the events recorded so far ("<type> <reason> <message>")
// and leaves the recorder empty.
func Drain(r *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}
