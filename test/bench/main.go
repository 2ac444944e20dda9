// Command bench compares this attach/detach controller with the one in upstream
// kube-controller-manager on the same workloads, side by side in one run:
//
//	go run ./test/bench -volumes=100,1000 -rates=20/30,200/300 -idle=60s
//
// Each controller runs alone, as a child process with a kubeconfig of its own
// static-token user (in system:masters), against a fresh etcd and kube-apiserver
// that audit-log that user's requests. Simulated nodes (internal/sim Kubelet) report
// the volumes of their pods in use; a simulated CSI external-attacher (internal/sim
// Attacher) marks VolumeAttachments attached at once. A load generator with no
// client-side rate limit then runs three phases, timestamping what it sees through
// its own watches:
//
//   - attach: one pod per pre-bound ReadWriteOnce CSI volume, created as fast as
//     possible, until every volume is in its node's status.volumesAttached;
//   - steady: an idle period with every volume attached, measuring the controller
//     process's CPU time and peak RSS from /proc;
//   - churn: every pod deleted at once, until every VolumeAttachment is gone and
//     every node status is empty.
//
// It prints Markdown tables of both controllers' figures and their ratio, and the
// controllers' API requests per volume by verb and resource, counted from the
// audit log; with -charts-dir it also draws SVG charts of pod → node status
// latency, idle CPU, peak RSS and API requests per volume (-charts-from redraws
// them from a saved results.json).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
)

func main() {
	if err := mainErr(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func mainErr() error {
	var (
		volumes     = flag.String("volumes", "100,1000", "Comma-separated workload sizes: volumes, one pod each.")
		rates       = flag.String("rates", "20/30,200/300", "Comma-separated client QPS/burst settings, given to both controllers.")
		controllers = flag.String("controllers", "this,upstream", "Comma-separated controllers to run, in order: this, upstream.")
		s           = suite{Progress: os.Stderr}
		keep        = flag.Bool("keep", false, "Keep the working directory (kubeconfigs, logs).")
		chartsDir   = flag.String("charts-dir", "", "Directory to draw SVG charts of the results in, linked from the Markdown printed; none if empty.")
		chartsFrom  = flag.String("charts-from", "", "Draw the charts of a saved "+resultsFile+" into -charts-dir (by default the file's directory) instead of running.")
	)
	flag.IntVar(&s.Nodes, "nodes", 50, "Simulated nodes; pods are spread over them round-robin.")
	flag.DurationVar(&s.Idle, "idle", 60*time.Second, "Idle period with every volume attached.")
	flag.DurationVar(&s.PhaseTimeout, "phase-timeout", 15*time.Minute, "Limit on the attach phase and on the churn phase.")
	flag.IntVar(&s.AttacherWorkers, "attacher-workers", 64, "VolumeAttachments the simulated external-attacher handles in parallel.")
	flag.IntVar(&s.KubeletWorkers, "kubelet-workers", 16, "Nodes the kubelet simulator syncs in parallel.")
	flag.IntVar(&s.Clients, "clients", 32, "Requests the load generator has in flight.")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if *chartsFrom != "" {
		return redrawCharts(os.Stdout, *chartsFrom, *chartsDir)
	}
	var err error
	if s.Volumes, err = parseList(*volumes, func(v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("volumes %q: want a positive integer", v)
		}
		return n, nil
	}); err != nil {
		return err
	}
	if s.Rates, err = parseList(*rates, parseRate); err != nil {
		return err
	}
	if s.Controllers, err = parseList(*controllers, parseController); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if s.Dir, err = os.MkdirTemp("", "adc-bench-"); err != nil {
		return fmt.Errorf("creating working directory: %w", err)
	}
	started := time.Now()
	list, err := s.run(ctx)
	if err != nil || *keep {
		fmt.Fprintf(os.Stderr, "working directory kept: %s\n", s.Dir)
	} else {
		defer os.RemoveAll(s.Dir)
	}
	if err != nil {
		return err
	}
	fmt.Printf("Run %s, took %s: `go run ./test/bench %s`\n\n", started.UTC().Format(time.RFC3339),
		time.Since(started).Round(time.Second), strings.Join(os.Args[1:], " "))
	versions, err := binaries.ReadVersions()
	if err != nil {
		return err
	}
	fmt.Printf("Machine: %s. This controller at %s; upstream kube-controller-manager %s.\n",
		machine(), gitDescribe(), versions.Kubernetes)
	fmt.Printf("Workload: %d nodes, one pod per ReadWriteOnce CSI volume, idle %s.\n\n", s.Nodes, s.Idle)
	newResults(s, list).write(os.Stdout)
	if *chartsDir == "" {
		return nil
	}
	return drawCharts(os.Stdout, *chartsDir, chartRunsOf(list))
}

func parseList[T any](s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for item := range strings.SplitSeq(s, ",") {
		v, err := parse(strings.TrimSpace(item))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// machine describes the cores, memory and CPU model.
func machine() string {
	model, memory := "unknown CPU", "unknown memory"
	if v, ok := procField("/proc/cpuinfo", "model name"); ok {
		model = v
	}
	if v, ok := procField("/proc/meminfo", "MemTotal"); ok {
		if kb, err := strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64); err == nil {
			memory = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	return fmt.Sprintf("%d cores, %s, %s", runtime.NumCPU(), memory, model)
}

// procField returns the value of the first "key: value" line of a /proc file.
func procField(path, key string) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		k, v, ok := strings.Cut(scanner.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// gitDescribe names the commit the controller was built from.
func gitDescribe() string {
	root, err := binaries.RepoRoot()
	if err != nil {
		return "unknown commit"
	}
	cmd := exec.Command("git", "describe", "--always", "--dirty")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "unknown commit"
	}
	return "commit " + strings.TrimSpace(string(out))
}
