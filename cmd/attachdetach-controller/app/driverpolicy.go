package app

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/reconciler"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
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
		if !namesVolumes(driver) {
			return fmt.Errorf("driver %q names no volume: want a CSI driver name (a DNS-1123 subdomain of at most 63 characters) or %s or %s",
				driver, volumename.PluginISCSI, volumename.PluginFC)
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

// namesVolumes tells whether volumes of the driver can exist: the API server takes
// a CSI driver name of at most 63 characters that is a DNS-1123 subdomain once
// lowercased, and the in-tree volumes this controller attaches are iSCSI and Fibre
// Channel. A policy for anything else would silently apply to nothing.
func namesVolumes(driver string) bool {
	if driver == volumename.PluginISCSI || driver == volumename.PluginFC {
		return true
	}
	return len(driver) <= 63 && len(validation.IsDNS1123Subdomain(strings.ToLower(driver))) == 0
}
