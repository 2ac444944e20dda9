package app

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	logsapi "k8s.io/component-base/logs/api/v1"
	// The JSON log format (--logging-format=json), as Kubernetes components
	// have it.
	_ "k8s.io/component-base/logs/json/register"
)

// loggingFlags are the logging flags of Kubernetes components the controller
// takes, by their field in logsapi.LoggingConfiguration, with its own usage
// text. component-base's other flags (split streams and buffers) need a
// feature gate the controller does not have, and klog's file flags
// (--log_dir, --logtostderr...) are gone from Kubernetes components.
var loggingFlags = []struct {
	name, field, usage string
}{
	{"logging-format", "format", "Log format: text (klog's) or json (one JSON object a line, as Kubernetes components write it)."},
	{"v", "verbosity", "Log verbosity, as in kube-controller-manager: 2 logs every attach and detach, 4 the decisions behind them. " +
		"With --enable-pprof it can be changed at run time with PUT /debug/flags/v."},
	{"vmodule", "vmodule", "Verbosity per source file: comma-separated PATTERN=N, e.g. reconciler=5 (text format only)."},
	{"log-flush-frequency", "flushFrequency", "Longest time between flushes of buffered log lines."},
}

// addLoggingFlags registers loggingFlags on fs, setting c.
func addLoggingFlags(fs *flag.FlagSet, c *logsapi.LoggingConfiguration) {
	all := flag.NewFlagSet("component-base logging", flag.ContinueOnError)
	logsapi.AddGoFlags(c, all)
	for _, f := range loggingFlags {
		fs.Var(all.Lookup(f.name).Value, f.name, f.usage)
	}
}

// isLoggingFlag tells whether name is one of loggingFlags.
func isLoggingFlag(name string) bool {
	for _, f := range loggingFlags {
		if f.name == name {
			return true
		}
	}
	return false
}

// validateLogging checks the logging configuration, naming the flag of each
// error.
func validateLogging(c *logsapi.LoggingConfiguration) error {
	var errs []error
	for _, e := range logsapi.Validate(c, nil, nil) {
		errs = append(errs, fmt.Errorf("%s: %s", flagOfField(e.Field), e.ErrorBody()))
	}
	return errors.Join(errs...)
}

// flagOfField names the flag that sets a field of logsapi.LoggingConfiguration,
// given its path ("vmodule[0]" is --vmodule's).
func flagOfField(path string) string {
	name, _, _ := strings.Cut(path, "[")
	name, _, _ = strings.Cut(name, ".")
	for _, f := range loggingFlags {
		if f.field == name {
			return "--" + f.name
		}
	}
	return path
}

// ApplyLogging sets up klog as the logging flags say. It is called once, before
// the first log line.
func ApplyLogging(o *Options) error {
	if err := logsapi.ValidateAndApply(o.Logging, nil); err != nil {
		return fmt.Errorf("applying the logging flags: %w", err)
	}
	return nil
}
