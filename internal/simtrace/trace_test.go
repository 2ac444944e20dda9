package simtrace

import (
	"fmt"
	"strings"
	"testing"
)

// lines returns the trace's lines without their time stamps.
func lines(tr *Trace) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSuffix(tr.String(), "\n"), "\n") {
		if _, text, ok := strings.Cut(l, "s  "); ok && !strings.HasPrefix(l, "...") {
			l = text
		}
		out = append(out, l)
	}
	return out
}

func TestTheTraceKeepsItsLastLines(t *testing.T) {
	tr := New(4)
	for i := range 6 {
		tr.Addf("line %d", i)
	}
	want := []string{"... 2 earlier lines dropped", "line 2", "line 3", "line 4", "line 5"}
	if got := lines(tr); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("trace = %q, want %q", got, want)
	}
}

func TestAHeldTraceKeepsWhatLedToTheHoldAndAQuarterOfWhatFollows(t *testing.T) {
	tr := New(8)
	for i := range 10 {
		tr.Addf("before %d", i)
	}
	tr.Hold()
	for i := range 5 {
		tr.Addf("after %d", i)
	}
	want := []string{"... 2 earlier lines dropped",
		"before 2", "before 3", "before 4", "before 5", "before 6", "before 7", "before 8", "before 9",
		"after 0", "after 1", "... 3 later lines dropped"}
	if got := lines(tr); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("trace = %q, want %q", got, want)
	}
}
