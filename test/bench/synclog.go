package main

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

// A start-up's informer sync, as each controller logs it: upstream's shared
// informers log "Caches are synced" once every informer of the attach/detach
// controller has listed; this controller logs the end of its rebuild, with how
// long the rebuild took, which began once its informers had synced and its
// start-up check had passed.
const (
	upstreamStartLine  = `"Starting attach detach controller"`
	upstreamSyncedLine = `"Caches are synced"`
	thisRebuiltLine    = `"State rebuilt, starting to reconcile"`
)

// klogHeader is the start of a klog text line: severity, month and day, time of
// day in the process's local time zone.
var klogHeader = regexp.MustCompile(`^[IWEF](\d{4} \d{2}:\d{2}:\d{2}\.\d{6}) `)

// rebuildDuration is the rebuild's duration in this controller's line.
var rebuildDuration = regexp.MustCompile(` duration="([^"]+)"`)

// informersSynced reads a controller's log and returns when its informers had
// synced, false if the log does not say so yet. year is the year the process ran
// in (klog's header has none).
func informersSynced(logPath string, kind controllerKind, year int) (time.Time, bool, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("reading the controller's log: %w", err)
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	lines.Buffer(make([]byte, 0, 64*1024), 1<<20)
	started := kind == thisController
	for lines.Scan() {
		line := lines.Text()
		switch {
		case !started:
			started = strings.Contains(line, upstreamStartLine)
		case kind == upstreamController && strings.Contains(line, upstreamSyncedLine):
			at, err := klogTime(line, year)
			return at, err == nil, err
		case kind == thisController && strings.Contains(line, thisRebuiltLine):
			at, err := klogTime(line, year)
			if err != nil {
				return time.Time{}, false, err
			}
			m := rebuildDuration.FindStringSubmatch(line)
			if m == nil {
				return time.Time{}, false, fmt.Errorf("no rebuild duration in %q", line)
			}
			took, err := time.ParseDuration(m[1])
			if err != nil {
				return time.Time{}, false, fmt.Errorf("parsing the rebuild duration in %q: %w", line, err)
			}
			return at.Add(-took), true, nil
		}
	}
	if err := lines.Err(); err != nil {
		return time.Time{}, false, fmt.Errorf("reading the controller's log: %w", err)
	}
	return time.Time{}, false, nil
}

// klogTime is the time in a klog line's header.
func klogTime(line string, year int) (time.Time, error) {
	m := klogHeader.FindStringSubmatch(line)
	if m == nil {
		return time.Time{}, fmt.Errorf("no klog header in %q", line)
	}
	at, err := time.ParseInLocation("0102 15:04:05.000000", m[1], time.Local)
	if err != nil {
		return time.Time{}, fmt.Errorf("parsing the time of %q: %w", line, err)
	}
	return at.AddDate(year-at.Year(), 0, 0), nil
}
