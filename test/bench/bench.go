package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/internal/binaries"
)

// suite is the set of runs of one benchmark invocation: every controller on every
// workload size at every rate.
type suite struct {
	Volumes     []int
	Rates       []rate
	Controllers []controllerKind
	// Nodes is the number of simulated nodes; 0 for the rule nodesFor.
	Nodes int
	Idle  time.Duration
	// Moves, FailoverRuns and Lease: see runConfig.
	Moves        int
	FailoverRuns int
	Lease        leaseTimings
	// PhaseTimeout, AttacherWorkers, KubeletWorkers and Clients: see runConfig.
	PhaseTimeout                             time.Duration
	AttacherWorkers, KubeletWorkers, Clients int
	// Objects and Profile: see runConfig.
	Objects objects
	Profile time.Duration
	// ThisFlags are extra flags for this controller.
	ThisFlags []string
	// ThisBinary, if set, is the executable of this controller to run instead of
	// building it from the working tree (to compare two builds).
	ThisBinary string
	// Dir receives one directory per run.
	Dir string
	// Progress receives a line per run.
	Progress io.Writer
}

// run builds this controller, finds kube-controller-manager, and runs every
// combination, the controllers one after the other for each workload and rate so
// that both see the machine in the same state.
func (s suite) run(ctx context.Context) ([]*result, error) {
	bins, err := findExecutables(ctx, s.ThisBinary)
	if err != nil {
		return nil, err
	}
	if bins, err = bins.copyTo(filepath.Join(s.Dir, "bin")); err != nil {
		return nil, err
	}
	total := len(s.Volumes) * len(s.Rates) * len(s.Controllers)
	var results []*result
	for _, volumes := range s.Volumes {
		for _, r := range s.Rates {
			for _, kind := range s.Controllers {
				cfg := runConfig{
					Controller:      kind,
					Executables:     bins,
					Rate:            r,
					Volumes:         volumes,
					Nodes:           s.nodesFor(volumes),
					Idle:            s.Idle,
					Moves:           s.Moves,
					FailoverRuns:    s.FailoverRuns,
					Lease:           s.Lease,
					Progress:        s.Progress,
					PhaseTimeout:    s.PhaseTimeout,
					AttacherWorkers: s.AttacherWorkers,
					KubeletWorkers:  s.KubeletWorkers,
					Clients:         s.Clients,
					Profile:         s.Profile,
					Objects:         s.Objects,
					ThisFlags:       s.ThisFlags,
					Dir:             filepath.Join(s.Dir, fmt.Sprintf("%s-%d-qps%g-burst%d", kind, volumes, r.QPS, r.Burst)),
				}
				if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
					return nil, fmt.Errorf("creating run directory: %w", err)
				}
				fmt.Fprintf(s.Progress, "run %d/%d: %s controller, %d volumes on %d nodes, QPS/burst %s\n",
					len(results)+1, total, kind, volumes, cfg.Nodes, r)
				started := time.Now()
				res, err := run(ctx, cfg)
				if err != nil {
					return nil, fmt.Errorf("%s controller, %d volumes, QPS/burst %s: %w", kind, volumes, r, err)
				}
				fmt.Fprintf(s.Progress, "  done in %s: all in node status after %s, fail-over %.1fs, hand-over %.1fs, start-up %s, all detached after %s\n",
					time.Since(started).Round(time.Second), seconds(res.allInStatus), allMovedTime.median(res.failovers),
					allMovedTime.median(res.handovers), seconds(res.startupToVA), seconds(max(res.allVAsGone, res.allNodesEmpty)))
				results = append(results, res)
			}
		}
	}
	return results, nil
}

// minNodes is the fewest nodes the rule nodesFor gives.
const minNodes = 10

// nodesFor is the number of nodes of a workload size: Nodes if set, else one node
// per ten volumes and at least minNodes, so that 1,000 volumes run on 100 nodes
// and 10,000 on 1,000.
func (s suite) nodesFor(volumes int) int {
	if s.Nodes > 0 {
		return s.Nodes
	}
	return max(volumes/10, minNodes)
}

// findExecutables builds this controller, unless given its executable, and finds
// (building it on first use) kube-controller-manager.
func findExecutables(ctx context.Context, this string) (executables, error) {
	bins := executables{this: this}
	var err error
	if bins.this == "" {
		if bins.this, err = binaries.Controller(ctx); err != nil {
			return bins, err
		}
	}
	bins.upstream, err = binaries.Tool(ctx, binaries.KubeControllerManager)
	return bins, err
}

// copyTo writes copies of both executables into dir and returns them. The runs
// start the copies, so that both controllers' executables are files written as a
// container runtime writes an image's: an executable fresh from the Go linker,
// which writes it through a memory map, has about 30 MiB more of its pages
// resident once started (this controller against an API server that does not
// answer: 86 MiB against 56 MiB for a copy of the same file), which peak RSS
// would count.
func (e executables) copyTo(dir string) (executables, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return e, fmt.Errorf("creating %s: %w", dir, err)
	}
	var err error
	out := executables{}
	if out.this, err = copyExecutable(e.this, filepath.Join(dir, "this-controller")); err != nil {
		return e, err
	}
	if out.upstream, err = copyExecutable(e.upstream, filepath.Join(dir, "upstream-controller")); err != nil {
		return e, err
	}
	return out, nil
}

// copyExecutable copies the executable from to the path to and returns to.
func copyExecutable(from, to string) (string, error) {
	in, err := os.Open(from)
	if err != nil {
		return "", fmt.Errorf("copying an executable: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return "", fmt.Errorf("copying an executable: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return "", fmt.Errorf("copying %s to %s: %w", from, to, err)
	}
	if err := out.Close(); err != nil {
		return "", fmt.Errorf("copying %s to %s: %w", from, to, err)
	}
	return to, nil
}
