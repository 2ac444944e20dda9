// Package simtrace keeps the last lines of what happened in a simulation, stamped
// with the simulated time since the start, to print when a run fails.
package simtrace

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// Trace is a ring of the last lines, until Hold stops it. Its methods are safe
// for concurrent use.
type Trace struct {
	mu    sync.Mutex
	start time.Time
	lines []string
	next  int
	total int
	// held is set by Hold: the ring keeps what it has, and later lines go to
	// after, up to a quarter of the ring's size; dropped counts the rest.
	held    bool
	after   []string
	dropped int
}

// New returns a trace keeping the last size lines, timed from now.
func New(size int) *Trace {
	return &Trace{start: time.Now(), lines: make([]string, size)}
}

// Addf adds a line.
func (t *Trace) Addf(format string, args ...any) {
	line := fmt.Sprintf("%9.3fs  %s", time.Since(t.start).Seconds(), fmt.Sprintf(format, args...))
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held {
		if len(t.after) < max(1, len(t.lines)/4) {
			t.after = append(t.after, line)
		} else {
			t.dropped++
		}
		return
	}
	t.lines[t.next] = line
	t.next = (t.next + 1) % len(t.lines)
	t.total++
}

// Hold keeps the lines the trace holds now from being pushed out by later ones,
// and keeps a quarter of its size of the lines that follow: a run that failed
// shows what led to its first violation, not only what happened in the time the
// run took to stop after it.
func (t *Trace) Hold() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.held = true
}

// Since returns the simulated time since the trace began.
func (t *Trace) Since() time.Duration { return time.Since(t.start) }

// String returns the lines kept, oldest first.
func (t *Trace) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	if t.total > len(t.lines) {
		fmt.Fprintf(&b, "... %d earlier lines dropped\n", t.total-len(t.lines))
	}
	for i := range len(t.lines) {
		if line := t.lines[(t.next+i)%len(t.lines)]; line != "" {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	for _, line := range t.after {
		b.WriteString(line)
		b.WriteByte('\n')
	}
	if t.dropped > 0 {
		fmt.Fprintf(&b, "... %d later lines dropped\n", t.dropped)
	}
	return b.String()
}

// Logger returns a logger that adds its lines, up to verbosity v, prefixed with who.
func (t *Trace) Logger(who string, v int) logr.Logger {
	return funcr.New(func(prefix, args string) {
		if prefix != "" {
			t.Addf("%s %s: %s", who, prefix, args)
			return
		}
		t.Addf("%s: %s", who, args)
	}, funcr.Options{Verbosity: v})
}
