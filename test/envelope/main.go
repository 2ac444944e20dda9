// Command envelope measures the controller alone, against the in-memory API of
// internal/fakeapi, at sizes up to Kubernetes' limits (150,000 pods on 5,000
// nodes), where a real API server on one machine could not carry the volumes:
//
//	go run ./test/envelope -pods=1000,10000,50000,150000 -out=envelope.md
//
// For each size it writes, straight into the store, minimal objects: a CSIDriver
// that requires attach, and per pod a bound claim, a CSI PersistentVolume, the pod
// (Running, on its node) and its VolumeAttachment (attached), on nodes (one per
// -pods-per-node pods) whose status lists the volumes attached and in use. The
// simulated kubelet and external-attacher of internal/sim run on clients of their
// own. Then the controller (pkg/controller, with its defaults) runs on a client of
// its own through these phases:
//
//   - start-up: a pod for a volume never attached is created and the controller
//     started; times to its state rebuilt (Run's onReady), to the probe's
//     VolumeAttachment created (its first decision) and to settled (the probe in
//     node status, the reconcile queue empty);
//   - attach: -changes pods created for new volumes, until every volume is in
//     its node's status;
//   - detach: those pods deleted, until every VolumeAttachment is gone and node
//     status no longer lists them; attach and detach again, -rounds in all, each
//     round right after the controller's periodic pass (-pass-wait), a round in
//     which the pass ran all the same measured again;
//   - idle: -idle with every volume attached.
//
// CPU is the controller's alone: its goroutines carry a pprof label, and a CPU
// profile of each phase is summed over the labelled samples outside the fake
// API's functions. Heap is measured above the world's and the agents' before the
// controller started: the live heap after a GC once settled, per volume, and the
// highest heap in use sampled every 20 ms during start-up. It prints a Markdown table, and with
// -out writes it to a file.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

func main() {
	if err := mainErr(); err != nil {
		fmt.Fprintln(os.Stderr, "envelope:", err)
		os.Exit(1)
	}
}

func mainErr() error {
	klog.InitFlags(nil)
	var (
		pods = flag.String("pods", "1000", "Comma-separated sizes: pods, each using one volume attached at the start.")
		out  = flag.String("out", "", "File to write the Markdown table to, besides printing it.")
		s    = suite{Logger: klog.Background()}
	)
	flag.IntVar(&s.PodsPerNode, "pods-per-node", 30, "Pods per node: a size of P pods runs on P/pods-per-node nodes, rounded up.")
	flag.IntVar(&s.Changes, "changes", 1000, "Pods created in the attach phase and deleted in the detach phase, each with a volume of its own.")
	flag.IntVar(&s.Rounds, "rounds", 1, "Times the attach and detach phases run, one after the other, for more CPU samples at the same size.")
	flag.DurationVar(&s.Idle, "idle", time.Minute, "Idle window with every volume attached; a minute holds one periodic pass (--attach-detach-reconcile-sync-period's default).")
	flag.DurationVar(&s.PassWait, "pass-wait", time.Minute+10*time.Second, "Before each round of attaches and detaches, wait at most this long for the controller's periodic pass (every minute) to come and go, so that the round runs between two passes; 0 to start at once.")
	flag.DurationVar(&s.Timeout, "timeout", 15*time.Minute, "Limit on each wait: start-up, settling, attach, detach.")
	flag.StringVar(&s.ProfileDir, "profiles", "", "Directory to write each phase's CPU profile to (cpu-<pods>-pods-<phase>.pprof; the controller's samples carry the label component=controller), and the heap profile once start-up settled (heap-<pods>-pods-settled.pprof).")
	flag.IntVar(&s.KubeletWorkers, "kubelet-workers", 16, "Nodes the simulated kubelet syncs in parallel.")
	flag.IntVar(&s.AttacherWorkers, "attacher-workers", 64, "VolumeAttachments the simulated external-attacher handles in parallel.")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	var err error
	if s.Pods, err = parseSizes(*pods); err != nil {
		return err
	}
	if s.PodsPerNode < 1 || s.Changes < 1 || s.Rounds < 1 || s.Idle <= 0 || s.KubeletWorkers < 1 || s.AttacherWorkers < 1 {
		return fmt.Errorf("-pods-per-node, -changes, -rounds, -idle, -kubelet-workers and -attacher-workers must be positive")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	results, err := s.run(ctx)
	var table strings.Builder
	writeTable(&table, results)
	fmt.Print(table.String())
	if err != nil {
		return err
	}
	if *out != "" {
		if err := os.WriteFile(*out, []byte(table.String()), 0o644); err != nil {
			return fmt.Errorf("writing the table: %w", err)
		}
	}
	return nil
}

// parseSizes reads a comma-separated list of positive integers.
func parseSizes(list string) ([]int, error) {
	var sizes []int
	for item := range strings.SplitSeq(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(item))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-pods: %q is not a positive integer", item)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}
