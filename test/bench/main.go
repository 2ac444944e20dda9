// Command bench compares this attach/detach controller with the one in upstream
// kube-controller-manager on the same workloads, side by side in one run:
//
//	go run ./test/bench -volumes=1000,10000 -rates=200/300 -idle=60s -out=DIR
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
//   - fail-over: two leader-elected replicas; the leader killed with SIGKILL at the
//     moment some pods move to other nodes, until every move is done;
//   - hand-over: the same with SIGTERM, as in a rolling update, until every move is
//     done and the other replica leads;
//   - start-up: the controller restarted while a pod with a new volume is created,
//     until its VolumeAttachment exists and its volume is in node status;
//   - churn: every pod deleted at once, until every VolumeAttachment is gone and
//     every node status is empty.
//
// It prints Markdown tables of both controllers' figures and their ratio, and the
// controllers' API requests per volume by verb and resource, counted from the
// audit log; with -out it also writes them, and results.json (Results), to a
// directory, and draws SVG charts of pod → node status latency, idle CPU, peak RSS
// and API requests per volume there or in -charts-dir (-charts-from redraws them
// from a saved results.json).
package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
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
		volumes     = flag.String("volumes", "1000,10000", "Comma-separated workload sizes: volumes, one pod each.")
		rates       = flag.String("rates", "200/300", "Comma-separated client QPS/burst settings, given to both controllers.")
		controllers = flag.String("controllers", "this,upstream", "Comma-separated controllers to run, in order: this, upstream.")
		lease       = flag.String("lease", "15s/10s/2s", "Leader election lease duration/renew deadline/retry period of both controllers in the fail-over and hand-over phases.")
		out         = flag.String("out", "", "Directory to write the tables ("+tablesFile+") and "+resultsFile+" to, besides printing the tables.")
		s           = suite{Progress: os.Stderr}
		keep        = flag.Bool("keep", false, "Keep the working directory (kubeconfigs, logs).")
		chartsDir   = flag.String("charts-dir", "", "Directory to draw SVG charts of the results in, linked from the Markdown printed; by default -out's, none if both are empty.")
		objectsFlag = flag.String("objects", string(realisticObjects), "What nodes, pods, claims and PersistentVolumes carry: realistic (what kubelet, a StatefulSet and a CSI provisioner put in them) or minimal (what attach/detach reads).")
		windowFrom  = flag.String("window-charts-from", "",
			"Comma-separated saved "+resultsFile+" files, each of a run of this controller with its own -this-flag="+windowFlag+"=D (upstream's runs among them drawn as a level): draw writes per volume and p50 against the window into -charts-dir instead of running.")
		chartsFrom = flag.String("charts-from", "", "Draw the charts of a saved "+resultsFile+" into -charts-dir (by default the file's directory) instead of running.")
	)
	flag.IntVar(&s.Nodes, "nodes", 0, fmt.Sprintf("Simulated nodes; pods are spread over them round-robin. 0: one per ten volumes, at least %d.", minNodes))
	flag.DurationVar(&s.Idle, "idle", 60*time.Second, "Idle period with every volume attached.")
	flag.IntVar(&s.Moves, "moves", 100, "Pods moved to another node while the leader is stopped, in each take-over of the fail-over and hand-over phases.")
	flag.IntVar(&s.FailoverRuns, "failover-runs", 1, "Take-overs of the fail-over phase (leader killed with SIGKILL) and of the hand-over phase (SIGTERM) each; with more than 1 the tables give each run and the median.")
	flag.DurationVar(&s.PhaseTimeout, "phase-timeout", 15*time.Minute, "Limit on the attach and churn phases each, and on each take-over's moves.")
	flag.IntVar(&s.AttacherWorkers, "attacher-workers", 64, "VolumeAttachments the simulated external-attacher handles in parallel.")
	flag.IntVar(&s.KubeletWorkers, "kubelet-workers", 16, "Nodes the kubelet simulator syncs in parallel.")
	flag.IntVar(&s.Clients, "clients", 32, "Requests the load generator has in flight.")
	flag.DurationVar(&s.Profile, "profile", 0, "If set, take a CPU profile of this controller of this length from the start of the attach phase, and a heap profile after the idle period, into the run's directory (with -keep).")
	flag.Func("this-flag", "An extra flag for this controller, such as --status-workers=16; may be repeated.", func(v string) error {
		s.ThisFlags = append(s.ThisFlags, v)
		return nil
	})
	flag.StringVar(&s.ThisBinary, "this-binary", "", "Run this executable as this controller instead of building it from the working tree.")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if *chartsFrom != "" {
		return redrawCharts(os.Stdout, *chartsFrom, *chartsDir)
	}
	if *windowFrom != "" {
		if *chartsDir == "" {
			return errors.New("-window-charts-from needs -charts-dir")
		}
		return drawWindowCharts(os.Stdout, *chartsDir, strings.Split(*windowFrom, ","))
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
	if s.Lease, err = parseLease(*lease); err != nil {
		return err
	}
	if s.Objects, err = parseObjects(*objectsFlag); err != nil {
		return err
	}
	if s.FailoverRuns < 1 {
		return fmt.Errorf("-failover-runs=%d: want at least 1", s.FailoverRuns)
	}
	if s.Nodes < 0 || s.Nodes == 1 {
		return fmt.Errorf("-nodes=%d: the fail-over phase moves pods to another node, want at least 2 (or 0 for the rule)", s.Nodes)
	}
	if *out != "" {
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return fmt.Errorf("creating output directory: %w", err)
		}
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
	versions, err := binaries.ReadVersions()
	if err != nil {
		return err
	}
	record := &Results{
		Started:         started.UTC(),
		TookSeconds:     time.Since(started).Seconds(),
		Command:         "go run ./test/bench " + strings.Join(os.Args[1:], " "),
		Machine:         machine(),
		ThisCommit:      gitDescribe(),
		UpstreamVersion: versions.Kubernetes,
		ThisFlags:       s.ThisFlags,
		Lease: LeaseTimings{
			DurationSeconds:      s.Lease.Duration.Seconds(),
			RenewDeadlineSeconds: s.Lease.RenewDeadline.Seconds(),
			RetryPeriodSeconds:   s.Lease.RetryPeriod.Seconds(),
		},
	}
	for _, r := range list {
		record.Runs = append(record.Runs, newRunResults(r))
	}
	var tables strings.Builder
	writeReport(&tables, record, newResults(s, list))
	fmt.Print(tables.String())
	if *out != "" {
		if err := os.WriteFile(filepath.Join(*out, tablesFile), []byte(tables.String()), 0o644); err != nil {
			return fmt.Errorf("writing tables: %w", err)
		}
		if err := writeResults(filepath.Join(*out, resultsFile), record); err != nil {
			return err
		}
	}
	if dir := cmp.Or(*chartsDir, *out); dir != "" {
		return drawCharts(os.Stdout, dir, chartRunsOf(list))
	}
	return nil
}

// tablesFile is the name of the Markdown tables -out writes.
const tablesFile = "results.md"

// writeReport writes the heading lines and the tables.
func writeReport(w io.Writer, record *Results, rs results) {
	fmt.Fprintf(w, "Run %s, took %s: `%s`\n\n", record.Started.Format(time.RFC3339),
		(time.Duration(record.TookSeconds) * time.Second).Round(time.Second), record.Command)
	fmt.Fprintf(w, "Machine: %s. This controller at %s; upstream kube-controller-manager %s.\n",
		record.Machine, record.ThisCommit, record.UpstreamVersion)
	fmt.Fprintf(w, "Workload: one pod per ReadWriteOnce CSI volume, %s objects, idle %s; fail-over (SIGKILL) and hand-over (SIGTERM): take-overs per phase %d, %d pods moved in each, lease duration/renew deadline/retry period %s for both.\n\n",
		rs.suite.Objects, rs.suite.Idle, rs.suite.FailoverRuns, rs.suite.Moves, rs.suite.Lease)
	rs.write(w)
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
