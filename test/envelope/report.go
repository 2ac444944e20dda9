package main

import (
	"fmt"
	"io"
	"time"
)

// perThousand scales the CPU of n operations to 1,000.
func perThousand(cpu time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return cpu.Seconds() * 1000 / float64(n)
}

// perMinute scales the CPU of a window to a minute.
func perMinute(cpu, window time.Duration) float64 {
	if window <= 0 {
		return 0
	}
	return cpu.Seconds() * float64(time.Minute) / float64(window)
}

// writeTable writes the results as a Markdown table.
func writeTable(w io.Writer, results []result) {
	fmt.Fprintln(w, "| pods | nodes | ready | first decision | start-up to settled (CPU s) | idle CPU (s per minute) | heap per volume | start-up peak heap | CPU s per 1,000 attaches | CPU s per 1,000 detaches |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		fmt.Fprintf(w, "| %d | %d | %s | %s | %s (%.2f) | %.3f | %.1f KiB | %.0f MiB | %.2f | %.2f |\n",
			r.Pods, r.Nodes, seconds(r.Ready), seconds(r.FirstDecision), seconds(r.StartUp), r.StartUpCPU.Controller.Seconds(),
			perMinute(r.IdleCPU.Controller, r.Idle), r.HeapPerVolume/1024, float64(r.PeakHeap)/(1<<20),
			perThousand(r.AttachCPU.Controller, r.Changes*r.Rounds), perThousand(r.DetachCPU.Controller, r.Changes*r.Rounds))
	}
}

// seconds formats a duration in seconds, to the millisecond below 10 s.
func seconds(d time.Duration) string {
	if d < 10*time.Second {
		return fmt.Sprintf("%.3f s", d.Seconds())
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}
