package app

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/reconciler"
)

// driverPolicies is the value of --max-wait-for-unmount-per-driver:
// DRIVER=DURATION or DRIVER=never, separated by commas.
type driverPolicies map[string]reconciler.DriverUnmountPolicy

func (p *driverPolicies) String() string {
	if p == nil || len(*p) == 0 {
		return ""
	}
	var parts []string
	for _, driver := range slices.Sorted(maps.Keys(*p)) {
		parts = append(parts, driver+"="+(*p)[driver].String())
	}
	return strings.Join(parts, ",")
}

func (p *driverPolicies) Set(value string) error {
	out := make(driverPolicies)
	for item := range strings.SplitSeq(value, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		driver, wait, ok := strings.Cut(item, "=")
		if !ok || driver == "" {
			return fmt.Errorf("%q is not DRIVER=DURATION or DRIVER=never", item)
		}
		if _, dup := out[driver]; dup {
			return fmt.Errorf("driver %s is given twice", driver)
		}
		if wait == "never" {
			out[driver] = reconciler.DriverUnmountPolicy{NeverForce: true}
			continue
		}
		d, err := time.ParseDuration(wait)
		if err != nil || d <= 0 {
			return fmt.Errorf("driver %s: %q is neither a positive duration nor never", driver, wait)
		}
		out[driver] = reconciler.DriverUnmountPolicy{MaxWait: d}
	}
	*p = out
	return nil
}
