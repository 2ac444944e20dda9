package main

import (
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"
)

const source = `package p

func f(a, b int, ok bool) (int, error) {
	if err := check(a); err != nil {
		return 0, err
	}
	if a < b && !ok {
		a++
	}
	return a, nil
}
`

func TestMutantsListsEveryGuardComparisonAndNegation(t *testing.T) {
	ms, err := mutants("p.go", []byte(source))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		at, what, line string
	}{
		{"p.go:4:2", `guard removed: if err != nil { ... return }`, "\tif err := check(a); false && (err != nil) {"},
		{"p.go:4:26", `"!=" -> "==" in err != nil`, "\tif err := check(a); err == nil {"},
		{"p.go:7:7", `"<" -> ">=" in a < b`, "\tif a >= b && !ok {"},
		{"p.go:7:11", `"&&" -> "||" in a < b && !ok`, "\tif a < b || !ok {"},
		{"p.go:7:14", `"!ok" -> "ok"`, "\tif a < b && ok {"},
	}
	if len(ms) != len(want) {
		t.Fatalf("got %d mutants, want %d: %v", len(ms), len(want), ms)
	}
	for i, w := range want {
		m := ms[i]
		if got := m.String(); got != w.at+": "+w.what {
			t.Errorf("mutant %d = %q, want %q", i, got, w.at+": "+w.what)
		}
		changed := m.apply([]byte(source))
		if _, err := parser.ParseFile(token.NewFileSet(), "p.go", changed, 0); err != nil {
			t.Errorf("mutant %d does not parse: %v", i, err)
		}
		if !slices.Contains(strings.Split(string(changed), "\n"), w.line) {
			t.Errorf("mutant %d gave\n%s\nwant a line %q", i, changed, w.line)
		}
	}
}

func TestMutantsLeaveAnIfWithElseOrWithoutReturn(t *testing.T) {
	const src = `package p

func g(x bool) int {
	if x {
		return 1
	} else {
		return 2
	}
}

func h(x int) {
	if x > 0 {
		x--
	}
}
`
	ms, err := mutants("p.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].what != `">" -> "<=" in x > 0` {
		t.Errorf("mutants = %v, want only the comparison in h", ms)
	}
}
