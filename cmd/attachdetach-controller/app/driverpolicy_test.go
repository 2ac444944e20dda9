package app

import (
	"strings"
	"testing"
)

func TestDriverPoliciesRefuseDriversNoVolumeCanHave(t *testing.T) {
	for _, value := range []string{
		"fast.csi.example.com =30s",
		"d\x00=1s",
		"^^=never",
		"dřiver.example.com=1s",
		strings.Repeat("a", 64) + "=1s",
		"kubernetes.io/nfs=1s",
	} {
		p := make(driverPolicies)
		if err := p.Set(value); err == nil || !strings.Contains(err.Error(), "names no volume") {
			t.Errorf("Set(%q) = %v, %v; want an error saying the driver names no volume", value, p, err)
		}
	}
}

func TestDriverPoliciesAcceptCSIDriversAndInTreePlugins(t *testing.T) {
	p := make(driverPolicies)
	value := "Fast.CSI.example.com=30s,kubernetes.io/iscsi=never,kubernetes.io/fc=1m," + strings.Repeat("a", 63) + "=1h"
	if err := p.Set(value); err != nil {
		t.Fatalf("Set(%q): %v", value, err)
	}
	if len(p) != 4 {
		t.Errorf("Set(%q) = %v, want 4 drivers", value, p)
	}
}
