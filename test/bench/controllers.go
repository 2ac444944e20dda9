package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// controllerKind names one of the two controllers compared.
type controllerKind string

const (
	// thisController is ./cmd/attachdetach-controller.
	thisController controllerKind = "this"
	// upstreamController is kube-controller-manager running only its attach/detach
	// controller.
	upstreamController controllerKind = "upstream"
)

// parseController reads a controller name as given to -controllers.
func parseController(s string) (controllerKind, error) {
	switch k := controllerKind(s); k {
	case thisController, upstreamController:
		return k, nil
	}
	return "", fmt.Errorf("unknown controller %q (want %q or %q)", s, thisController, upstreamController)
}

// userName is the static-token user the controller authenticates as; the audit log
// records this user's requests only.
func (k controllerKind) userName() string {
	if k == upstreamController {
		return "bench-kube-controller-manager"
	}
	return "bench-attachdetach-controller"
}

// rate is a client-side rate limit: queries per second and burst.
type rate struct {
	QPS   float64
	Burst int
}

func (r rate) String() string {
	return strconv.FormatFloat(r.QPS, 'f', -1, 64) + "/" + strconv.Itoa(r.Burst)
}

// parseRate reads "qps/burst".
func parseRate(s string) (rate, error) {
	qps, burst, ok := strings.Cut(s, "/")
	if !ok {
		return rate{}, fmt.Errorf("rate %q: want qps/burst, e.g. 20/30", s)
	}
	q, err := strconv.ParseFloat(qps, 64)
	if err != nil || q <= 0 {
		return rate{}, fmt.Errorf("rate %q: qps must be a positive number", s)
	}
	b, err := strconv.Atoi(burst)
	if err != nil || b < 1 {
		return rate{}, fmt.Errorf("rate %q: burst must be a positive integer", s)
	}
	return rate{QPS: q, Burst: b}, nil
}

// executables are the two controllers' executables.
type executables struct {
	this, upstream string
}

// controllerArgs is the command line of a controller talking to the API server
// through kubeconfig at the given client rate limit.
func controllerArgs(kind controllerKind, kubeconfig string, r rate) []string {
	qps, burst := strconv.FormatFloat(r.QPS, 'f', -1, 64), strconv.Itoa(r.Burst)
	if kind == upstreamController {
		return []string{
			"--kubeconfig=" + kubeconfig,
			"--controllers=persistentvolume-attach-detach-controller",
			"--leader-elect=false",
			// Every controller uses the kubeconfig's user, not a ServiceAccount of its own.
			"--use-service-account-credentials=false",
			// No HTTPS endpoint: nothing to authenticate or authorise, so no
			// authentication or authorization kubeconfig is needed.
			"--secure-port=0",
			"--kube-api-qps=" + qps,
			"--kube-api-burst=" + burst,
		}
	}
	// Events keep their default limit of their own (--event-qps, --event-burst):
	// upstream has no such setting, its attach/detach controller writes events
	// within its API client's limit.
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--http-endpoint=",
		"--kube-api-qps=" + qps,
		"--kube-api-burst=" + burst,
	}
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// cpuTime returns the user plus system CPU time the process has used so far.
func cpuTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading CPU time: %w", err)
	}
	// The command name, in parentheses, may contain spaces: fields start after it.
	end := strings.LastIndexByte(string(data), ')')
	if end < 0 {
		return 0, errors.New("reading CPU time: malformed /proc stat line")
	}
	fields := strings.Fields(string(data[end+1:]))
	// fields[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(fields) < 13 {
		return 0, errors.New("reading CPU time: short /proc stat line")
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("reading CPU time: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// peakRSS returns the process's peak resident set size in bytes (VmHWM).
func peakRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading peak RSS: %w", err)
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		value, ok := strings.CutPrefix(scanner.Text(), "VmHWM:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(value), "kB")), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("reading peak RSS: %w", err)
		}
		return kb * 1024, nil
	}
	if err := scanner.Err(); err != nil {
		return 0, fmt.Errorf("reading peak RSS: %w", err)
	}
	return 0, errors.New("reading peak RSS: no VmHWM line")
}
