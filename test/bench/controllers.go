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

// leaseTimings are the leader election timings given to both controllers in the
// fail-over phase.
type leaseTimings struct {
	Duration, RenewDeadline, RetryPeriod time.Duration
}

func (l leaseTimings) String() string {
	return l.Duration.String() + "/" + l.RenewDeadline.String() + "/" + l.RetryPeriod.String()
}

// parseLease reads "duration/renew-deadline/retry-period", e.g. 15s/10s/2s.
func parseLease(s string) (leaseTimings, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return leaseTimings{}, fmt.Errorf("lease %q: want duration/renew-deadline/retry-period, e.g. 15s/10s/2s", s)
	}
	var d [3]time.Duration
	for i, p := range parts {
		v, err := time.ParseDuration(p)
		if err != nil || v <= 0 {
			return leaseTimings{}, fmt.Errorf("lease %q: %q is not a positive duration", s, p)
		}
		d[i] = v
	}
	l := leaseTimings{Duration: d[0], RenewDeadline: d[1], RetryPeriod: d[2]}
	if l.Duration <= l.RenewDeadline || l.RenewDeadline <= l.RetryPeriod {
		return leaseTimings{}, fmt.Errorf("lease %q: want duration > renew deadline > retry period", s)
	}
	return l, nil
}

// leaseNamespace is where both controllers keep their leader Lease.
const leaseNamespace = "kube-system"

// leaseKey is the namespace/name of the controller's leader Lease: upstream's is
// kube-controller-manager's default, this controller's its own default
// (--leader-elect-resource-name).
func (k controllerKind) leaseKey() string {
	if k == upstreamController {
		return leaseNamespace + "/kube-controller-manager"
	}
	return leaseNamespace + "/attachdetach-controller"
}

// executables are the two controllers' executables.
type executables struct {
	this, upstream string
}

// controllerArgs is the command line of a controller talking to the API server
// through kubeconfig at the given client rate limit, with leader election on the
// controller's Lease (leaseKey) when lease is not nil.
func controllerArgs(kind controllerKind, kubeconfig string, r rate, lease *leaseTimings) []string {
	qps, burst := strconv.FormatFloat(r.QPS, 'f', -1, 64), strconv.Itoa(r.Burst)
	election := []string{"--leader-elect=false"}
	if lease != nil {
		election = []string{
			"--leader-elect=true",
			"--leader-elect-lease-duration=" + lease.Duration.String(),
			"--leader-elect-renew-deadline=" + lease.RenewDeadline.String(),
			"--leader-elect-retry-period=" + lease.RetryPeriod.String(),
			"--leader-elect-resource-namespace=" + leaseNamespace,
		}
	}
	if kind == upstreamController {
		return append([]string{
			"--kubeconfig=" + kubeconfig,
			"--controllers=persistentvolume-attach-detach-controller",
			// Every controller uses the kubeconfig's user, not a ServiceAccount of its own.
			"--use-service-account-credentials=false",
			// No HTTPS endpoint: nothing to authenticate or authorise, so no
			// authentication or authorization kubeconfig is needed.
			"--secure-port=0",
			"--kube-api-qps=" + qps,
			"--kube-api-burst=" + burst,
		}, election...)
	}
	// Events keep their default limit of their own (--event-qps, --event-burst):
	// upstream has no such setting, its attach/detach controller writes events
	// within its API client's limit.
	return append([]string{
		"--kubeconfig=" + kubeconfig,
		"--http-endpoint=",
		"--kube-api-qps=" + qps,
		"--kube-api-burst=" + burst,
	}, election...)
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
