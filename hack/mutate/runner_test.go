package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// exitError is an *exec.ExitError, as a failed go test returns.
func exitError(t *testing.T) error {
	t.Helper()
	err := exec.Command("false").Run()
	if err == nil {
		t.Fatal("false did not fail")
	}
	return err
}

func TestRunnerTestsEveryMutantAgainstThePackageBeforeAnyAgainstTheNextRun(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "p.go")
	if err := os.WriteFile(file, []byte(source), 0o600); err != nil {
		t.Fatal(err)
	}
	ms, err := mutants(file, []byte(source))
	if err != nil {
		t.Fatal(err)
	}
	// The package's tests kill the first two mutants, the simulation the third; the
	// fourth does not compile; the fifth survives both.
	fails := exitError(t)
	var calls []string
	test := func(_ context.Context, overlay string, tr []string, _ time.Duration) (string, error) {
		if overlay == "" {
			calls = append(calls, "unchanged "+tr[0])
			return "", nil
		}
		b, err := os.ReadFile(filepath.Join(filepath.Dir(overlay), "p.go"))
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(ms, func(m mutant) bool { return string(m.apply([]byte(source))) == string(b) })
		calls = append(calls, tr[0]+" "+ms[i].what)
		switch {
		case i < 2 && tr[0] != "./sim":
			return "FAIL", fails
		case i == 2 && tr[0] == "./sim":
			return "FAIL", fails
		case i == 3:
			return "FAIL p [build failed]", fails
		}
		return "ok", nil
	}
	r := &runner{cfg: config{with: withFlag{{"./sim", "-seeds=2"}}}, tmp: t.TempDir(), baseline: map[string]time.Duration{}, test: test}
	res, err := r.file(context.Background(), file, ms)
	if err != nil {
		t.Fatal(err)
	}
	pkg := "./" + filepath.Dir(file)
	want := []string{"unchanged " + pkg}
	for _, m := range ms {
		want = append(want, pkg+" "+m.what)
	}
	want = append(want, "unchanged ./sim", "./sim "+ms[2].what, "./sim "+ms[4].what)
	if !slices.Equal(calls, want) {
		t.Errorf("test runs:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"))
	}
	if res.counts[killed] != 3 || res.counts[survived] != 1 || res.counts[notBuilt] != 1 {
		t.Errorf("counts = %v, want 3 killed, 1 survived, 1 not compiled", res.counts)
	}
	if len(res.survivors) != 1 || res.survivors[0] != ms[4] {
		t.Errorf("survivors = %v, want %v", res.survivors, ms[4])
	}
}

func TestRunnerSkipsTheNextRunWhenThePackageKillsEveryMutant(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "p.go")
	if err := os.WriteFile(file, []byte(source), 0o600); err != nil {
		t.Fatal(err)
	}
	ms, err := mutants(file, []byte(source))
	if err != nil {
		t.Fatal(err)
	}
	fails := exitError(t)
	ranSim := false
	test := func(_ context.Context, overlay string, tr []string, _ time.Duration) (string, error) {
		if tr[0] == "./sim" {
			ranSim = true
		}
		if overlay == "" {
			return "", nil
		}
		return "FAIL", fails
	}
	r := &runner{cfg: config{with: withFlag{{"./sim"}}}, tmp: t.TempDir(), baseline: map[string]time.Duration{}, test: test}
	res, err := r.file(context.Background(), file, ms)
	if err != nil {
		t.Fatal(err)
	}
	if ranSim {
		t.Error("the simulation ran, not even on the unchanged code should it")
	}
	if res.counts[killed] != len(ms) || len(res.survivors) != 0 {
		t.Errorf("counts = %v, survivors %v, want all %d killed", res.counts, res.survivors, len(ms))
	}
}

func TestOnlySelectsTheMutantsAtAPosition(t *testing.T) {
	ms, err := mutants("p.go", []byte(source))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		only onlyFlag
		want []string
	}{
		{nil, []string{"p.go:4:2", "p.go:4:26", "p.go:7:7", "p.go:7:11", "p.go:7:14"}},
		{onlyFlag{"p.go:7"}, []string{"p.go:7:7", "p.go:7:11", "p.go:7:14"}},
		{onlyFlag{"p.go:7:11", "p.go:4:2"}, []string{"p.go:4:2", "p.go:7:11"}},
		{onlyFlag{"q.go:7"}, nil},
	}
	for _, tt := range tests {
		var got []string
		for _, m := range ms {
			if tt.only.selects(m) {
				got = append(got, strings.SplitN(m.String(), ": ", 2)[0])
			}
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("-only %v selects %v, want %v", tt.only, got, tt.want)
		}
	}
}
