// Command mutate checks that the tests would notice a broken safety rule: it makes
// one small change at a time to the source files it is given (a guard never taken, a
// comparison or && / || turned into its opposite, a ! dropped), runs the tests
// against the changed code, and counts the changes the tests catch (killed) and
// those they miss (survived). hack/mutation.sh runs it over the safety-critical
// files.
//
// The tests of each file's own package run first, then each package given with
// -with, all with go test -failfast; the first failure kills the mutant. A test run
// that outlasts its time limit kills it too (the change made something hang). The
// changed file reaches the compiler through go test -overlay: the working tree is
// never written, so stopping the command halfway leaves nothing behind.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

const usage = `Usage: go run ./hack/mutate [flags] file.go...

Run from the module root. For each file, every mutant is tested against the tests of
the file's package, then against each -with package, and the file's killed, survived
and total counts are printed with each survivor as file:line:col and the change.

Flags:
`

// withFlag collects the -with packages: a package path followed by its test flags.
type withFlag [][]string

func (w *withFlag) String() string { return fmt.Sprint(*w) }

func (w *withFlag) Set(v string) error {
	fields := strings.Fields(v)
	if len(fields) == 0 {
		return errors.New("-with needs a package, optionally followed by test flags")
	}
	*w = append(*w, fields)
	return nil
}

type config struct {
	with          withFlag
	list          bool
	timeoutFactor float64
	timeoutSlack  time.Duration
}

func main() {
	var cfg config
	flag.Usage = func() {
		fmt.Fprint(flag.CommandLine.Output(), usage)
		flag.PrintDefaults()
	}
	flag.Var(&cfg.with, "with", "a package whose tests also run against every mutant, with its test flags, such as './test/simulation -seeds=200' (repeatable)")
	flag.BoolVar(&cfg.list, "list", false, "list the mutants and their number per file, and run nothing")
	flag.Float64Var(&cfg.timeoutFactor, "timeout-factor", 3, "a test run is stopped, and the mutant counted killed, after this many times the run's time on the unchanged code...")
	flag.DurationVar(&cfg.timeoutSlack, "timeout-slack", 3*time.Minute, "...plus this much, for compiling the changed code")
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, cfg, flag.Args())
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(1)
	}
}

// outcome is what became of one mutant.
type outcome int

const (
	survived outcome = iota
	killed
	timedOut
	// notBuilt is a mutant that did not compile; it counts in no total.
	notBuilt
)

// fileResult counts the outcomes of one file's mutants.
type fileResult struct {
	file      string
	counts    map[outcome]int
	survivors []mutant
	took      time.Duration
}

func run(ctx context.Context, cfg config, files []string) error {
	all := make(map[string][]mutant, len(files))
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		ms, err := mutants(file, src)
		if err != nil {
			return err
		}
		all[file] = ms
	}
	if cfg.list {
		for _, file := range files {
			for _, m := range all[file] {
				fmt.Println(m)
			}
			fmt.Printf("%s: %d mutants\n", file, len(all[file]))
		}
		return nil
	}

	tmp, err := os.MkdirTemp("", "mutate-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	r := &runner{cfg: cfg, tmp: tmp, baseline: make(map[string]time.Duration)}
	var results []fileResult
	for _, file := range files {
		res, err := r.file(ctx, file, all[file])
		if err != nil {
			return err
		}
		results = append(results, res)
	}
	fmt.Println()
	fmt.Println("file  killed  survived  total  (killed by timeout, not compiled)  took")
	for _, res := range results {
		k := res.counts[killed] + res.counts[timedOut]
		fmt.Printf("%s  %d  %d  %d  (%d, %d)  %s\n", res.file, k, res.counts[survived], k+res.counts[survived],
			res.counts[timedOut], res.counts[notBuilt], res.took.Round(time.Second))
	}
	for _, res := range results {
		for _, m := range res.survivors {
			fmt.Println("SURVIVED", m)
		}
	}
	return nil
}

// runner runs the test packages against mutants.
type runner struct {
	cfg config
	tmp string
	// baseline is how long each test run took on the unchanged code.
	baseline map[string]time.Duration
}

// file tests every mutant of one file.
func (r *runner) file(ctx context.Context, file string, ms []mutant) (fileResult, error) {
	began := time.Now()
	res := fileResult{file: file, counts: make(map[outcome]int)}
	abs, err := filepath.Abs(file)
	if err != nil {
		return res, err
	}
	src, err := os.ReadFile(abs)
	if err != nil {
		return res, err
	}
	runs := append([][]string{{"./" + filepath.Dir(file)}}, r.cfg.with...)
	for _, tr := range runs {
		if err := r.measure(ctx, tr); err != nil {
			return res, err
		}
	}
	fmt.Printf("%s: %d mutants\n", file, len(ms))
	for i, m := range ms {
		mutantBegan := time.Now()
		o, by, err := r.mutant(ctx, abs, src, m, runs)
		if err != nil {
			return res, err
		}
		res.counts[o]++
		took := time.Since(mutantBegan).Round(time.Second)
		switch o {
		case survived:
			res.survivors = append(res.survivors, m)
			fmt.Printf("  %d/%d survived (%s): %s\n", i+1, len(ms), took, m)
		case killed:
			fmt.Printf("  %d/%d killed by %s (%s): %s\n", i+1, len(ms), by, took, m)
		case timedOut:
			fmt.Printf("  %d/%d killed by %s timing out (%s): %s\n", i+1, len(ms), by, took, m)
		case notBuilt:
			fmt.Printf("  %d/%d did not compile (%s): %s\n", i+1, len(ms), took, m)
		}
	}
	res.took = time.Since(began)
	return res, nil
}

// measure runs a test package on the unchanged code, once, to know how long it
// takes; it must pass, or the mutants' failures would mean nothing.
func (r *runner) measure(ctx context.Context, tr []string) error {
	key := strings.Join(tr, " ")
	if _, ok := r.baseline[key]; ok {
		return nil
	}
	began := time.Now()
	out, err := r.goTest(ctx, "", tr, 0)
	if err != nil {
		return fmt.Errorf("tests %s fail on the unchanged code: %w\n%s", key, err, out)
	}
	r.baseline[key] = time.Since(began)
	fmt.Printf("unchanged code: %s passes in %s\n", key, r.baseline[key].Round(time.Second))
	return nil
}

// mutant runs the test packages against one mutant until one fails.
func (r *runner) mutant(ctx context.Context, abs string, src []byte, m mutant, runs [][]string) (outcome, string, error) {
	changed := filepath.Join(r.tmp, filepath.Base(abs))
	if err := os.WriteFile(changed, m.apply(src), 0o600); err != nil {
		return 0, "", err
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {abs: changed}})
	if err != nil {
		return 0, "", err
	}
	overlayFile := filepath.Join(r.tmp, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o600); err != nil {
		return 0, "", err
	}
	for _, tr := range runs {
		key := strings.Join(tr, " ")
		limit := time.Duration(r.cfg.timeoutFactor*float64(r.baseline[key])) + r.cfg.timeoutSlack
		out, err := r.goTest(ctx, overlayFile, tr, limit)
		var exit *exec.ExitError
		switch {
		case ctx.Err() != nil:
			return 0, "", ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			return timedOut, tr[0], nil
		case errors.As(err, &exit) && (strings.Contains(out, "[build failed]") || strings.Contains(out, "[setup failed]")):
			return notBuilt, tr[0], nil
		case errors.As(err, &exit):
			return killed, tr[0], nil
		case err != nil:
			return 0, "", fmt.Errorf("running the tests of %s: %w", key, err)
		}
	}
	return survived, "", nil
}

// goTest runs go test -count=1 -failfast -vet=off on one package with its flags,
// with the overlay if one is given, within limit if it is not zero, and returns
// what it printed.
func (r *runner) goTest(ctx context.Context, overlay string, tr []string, limit time.Duration) (string, error) {
	if limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	args := []string{"test", "-count=1", "-failfast", "-vet=off"}
	if overlay != "" {
		args = append(args, "-overlay="+overlay)
	}
	args = append(args, tr...)
	cmd := exec.CommandContext(ctx, "go", args...)
	// go test starts the test binary as a child: stop the whole process group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil && err != nil {
		return string(out), ctx.Err()
	}
	return string(out), err
}
