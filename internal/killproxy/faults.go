package killproxy

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Fault is what the proxy does to one request. The zero value forwards it untouched.
// Delay combines with any of the others; at most one of Status, Drop and Reset is set.
type Fault struct {
	// Delay holds the request this long before anything else happens to it.
	Delay time.Duration
	// Status, when not zero, answers the request with this status without forwarding
	// it. A 429 carries a Retry-After header of RetryAfter (whole seconds, at least 1).
	Status     int
	RetryAfter time.Duration
	// Drop forwards the request, waits for the API server's response and then resets
	// the client's connection instead of answering: the change was made, the client
	// cannot know it.
	Drop bool
	// Reset resets the client's connection without forwarding the request.
	Reset bool
}

// The faults tests use most.
var (
	// Fail500 fails a request before it reaches the API server.
	Fail500 = Fault{Status: http.StatusInternalServerError}
	// Throttle asks the client to come back in a second, as a loaded API server does.
	Throttle = Fault{Status: http.StatusTooManyRequests, RetryAfter: time.Second}
	// DropResponse lets the request through and loses the answer.
	DropResponse = Fault{Drop: true}
	// ResetConnection loses the request.
	ResetConnection = Fault{Reset: true}
)

// Delayed returns a fault that only holds a request for d.
func Delayed(d time.Duration) Fault {
	return Fault{Delay: d}
}

func (f Fault) String() string {
	var parts []string
	if f.Delay > 0 {
		parts = append(parts, "delay "+f.Delay.String())
	}
	switch {
	case f.Status != 0:
		parts = append(parts, "fail "+strconv.Itoa(f.Status))
	case f.Drop:
		parts = append(parts, "drop response")
	case f.Reset:
		parts = append(parts, "reset")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// retryAfterSeconds is the Retry-After header value of a 429.
func (f Fault) retryAfterSeconds() string {
	return strconv.Itoa(max(1, int(f.RetryAfter.Round(time.Second)/time.Second)))
}

// writeStatus answers with the fault's status as a metav1.Status, the way the API
// server reports errors.
func (f Fault) writeStatus(w http.ResponseWriter) {
	status := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  fmt.Sprintf("killproxy: injected %d", f.Status),
		Reason:   metav1.StatusReasonInternalError,
		Code:     int32(f.Status),
	}
	if f.Status == http.StatusTooManyRequests {
		status.Reason = metav1.StatusReasonTooManyRequests
		w.Header().Set("Retry-After", f.retryAfterSeconds())
	}
	body, err := json.Marshal(status)
	if err != nil {
		http.Error(w, status.Message, f.Status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(f.Status)
	_, _ = w.Write(body)
}

// Rule chooses the fault for each request the proxy receives. It is called
// concurrently.
type Rule func(*http.Request) Fault

// Weighted is a fault and how often Random picks it relative to the other choices.
type Weighted struct {
	Fault  Fault
	Weight float64
}

// Random returns a rule that draws each request's fault from the choices, in
// proportion to their weights, from a random source seeded with seed. Include the zero
// Fault among the choices for requests to pass untouched.
func Random(seed uint64, choices ...Weighted) Rule {
	var total float64
	for _, c := range choices {
		total += c.Weight
	}
	var mu sync.Mutex
	rnd := rand.New(rand.NewPCG(seed, seed))
	return func(*http.Request) Fault {
		mu.Lock()
		x := rnd.Float64() * total
		mu.Unlock()
		for _, c := range choices {
			if x < c.Weight {
				return c.Fault
			}
			x -= c.Weight
		}
		return Fault{}
	}
}

// AtMostInARow returns rule, except that requests with the same method and path
// (one object's writes, say) fail at most n times in a row: the next one only
// keeps its delay. A fault fails a request unless it only delays it. Random
// faults alone fail some requests again and again, and a client that backs off
// exponentially after each failure then waits minutes: bounding the run keeps a
// test of progress under faults from testing an outage instead.
func AtMostInARow(n int, rule Rule) Rule {
	var mu sync.Mutex
	inARow := map[string]int{}
	return func(r *http.Request) Fault {
		f := rule(r)
		key := r.Method + " " + r.URL.Path
		mu.Lock()
		defer mu.Unlock()
		switch {
		case !f.fails():
			delete(inARow, key)
		case inARow[key] >= n:
			delete(inARow, key)
			f = Fault{Delay: f.Delay}
		default:
			inARow[key]++
		}
		return f
	}
}

// fails tells whether the fault keeps the client from getting the API server's
// answer.
func (f Fault) fails() bool {
	return f.Status != 0 || f.Drop || f.Reset
}

// Script returns a rule that gives the requests it is asked about the faults in
// order, and no fault once they are used up.
func Script(faults ...Fault) Rule {
	var mu sync.Mutex
	next := 0
	return func(*http.Request) Fault {
		mu.Lock()
		defer mu.Unlock()
		if next >= len(faults) {
			return Fault{}
		}
		next++
		return faults[next-1]
	}
}

// When applies the rule to the requests that match and lets the others pass.
func When(match func(*http.Request) bool, rule Rule) Rule {
	return func(r *http.Request) Fault {
		if !match(r) {
			return Fault{}
		}
		return rule(r)
	}
}

// discardResponse takes the API server's response to a dropped request and keeps only
// its status.
type discardResponse struct {
	header http.Header
	status int
}

func (d *discardResponse) Header() http.Header {
	return d.header
}

func (d *discardResponse) Write(b []byte) (int, error) {
	if d.status == 0 {
		d.status = http.StatusOK
	}
	return len(b), nil
}

func (d *discardResponse) WriteHeader(status int) {
	if d.status == 0 {
		d.status = status
	}
}

// Flush does nothing: nothing reaches the client.
func (d *discardResponse) Flush() {}
