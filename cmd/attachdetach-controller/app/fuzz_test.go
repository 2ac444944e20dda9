package app

import (
	"maps"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/attachdetach-controller/attachdetach-controller/pkg/reconciler"
	"github.com/attachdetach-controller/attachdetach-controller/pkg/volumename"
)

// FuzzDriverPolicies reads --max-wait-for-unmount-per-driver. What it accepts
// names drivers whose volumes can exist, applies to their volumes, and prints
// back as a value that reads as the same policies.
func FuzzDriverPolicies(f *testing.F) {
	f.Fuzz(func(t *testing.T, value string) {
		before := driverPolicies{"kept.csi.example.com": {NeverForce: true}}
		p := maps.Clone(before)
		err := p.Set(value)
		again := make(driverPolicies)
		errAgain := again.Set(value)
		if (err == nil) != (errAgain == nil) || (err == nil && !maps.Equal(p, again)) {
			t.Fatalf("Set(%q) is not deterministic", value)
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("Set(%q) failed with an empty error", value)
			}
			if !maps.Equal(p, before) {
				t.Fatalf("Set(%q) failed but changed the policies to %v", value, p)
			}
			return
		}
		for driver, policy := range p {
			csiDriver := len(driver) <= 63 && len(validation.IsDNS1123Subdomain(strings.ToLower(driver))) == 0
			if !csiDriver && driver != volumename.PluginISCSI && driver != volumename.PluginFC {
				t.Fatalf("Set(%q) accepted driver %q, which names no volume", value, driver)
			}
			if policy.NeverForce == (policy.MaxWait > 0) {
				t.Fatalf("Set(%q) gave driver %s the policy %+v, want either never or a positive wait", value, driver, policy)
			}
			vol := volumename.CSI(driver, "handle")
			if !csiDriver {
				vol = volumename.UniqueName(driver + "/portal:iqn:0")
			}
			got, whose := reconciler.UnmountPolicy{PerDriver: p}.For(vol)
			if got != policy || whose != driver {
				t.Fatalf("Set(%q): the volume %s gets the policy %v of %q, want %v of %q", value, vol, got, whose, policy, driver)
			}
		}
		printed := p.String()
		reread := make(driverPolicies)
		if err := reread.Set(printed); err != nil || !maps.Equal(reread, p) {
			t.Fatalf("Set(%q) gave %v, printed as %q, which reads back as %v, %v", value, p, printed, reread, err)
		}
		if reread.String() != printed {
			t.Fatalf("Set(%q) printed as %q, then as %q", value, printed, reread.String())
		}
	})
}
