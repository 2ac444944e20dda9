package volumename

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzUniqueName builds the unique name of a CSI volume and reads it back, as the
// controller does with the names it writes to node status.
func FuzzUniqueName(f *testing.F) {
	f.Fuzz(func(t *testing.T, driver, handle string) {
		name := CSI(driver, handle)
		if name != CSI(driver, handle) {
			t.Fatalf("CSI(%q, %q) gave two names", driver, handle)
		}
		if !IsCSI(name) || ReportOnly(name) {
			t.Fatalf("%q: IsCSI = %v, ReportOnly = %v, want true, false", name, IsCSI(name), ReportOnly(name))
		}
		// A driver name has no '^' (the API server allows DNS-1123 subdomains only),
		// while a handle may hold any number.
		gotDriver, gotHandle, err := ParseUniqueName(name)
		if driver != "" && !strings.Contains(driver, "^") && handle != "" {
			if err != nil || gotDriver != driver || gotHandle != handle {
				t.Fatalf("ParseUniqueName(CSI(%q, %q)) = %q, %q, %v", driver, handle, gotDriver, gotHandle, err)
			}
			if got, want := PluginLabel(name), PluginCSI+":"+driver; got != want {
				t.Fatalf("PluginLabel(%q) = %q, want %q", name, got, want)
			}
		}
		if err != nil && err.Error() == "" {
			t.Fatalf("ParseUniqueName(%q) failed with an empty error", name)
		}
	})
}

// FuzzNodeStatusName reads any string node.status.volumesAttached or volumesInUse
// may hold, as the controller reads them back into volumes after a restart and
// when it matches a VolumeAttachment to a volume.
func FuzzNodeStatusName(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		name := UniqueName(s)
		driver, handle, err := ParseUniqueName(name)
		d2, h2, err2 := ParseUniqueName(name)
		if d2 != driver || h2 != handle || (err == nil) != (err2 == nil) {
			t.Fatalf("ParseUniqueName(%q) is not deterministic", s)
		}
		if IsCSI(name) && ReportOnly(name) {
			t.Fatalf("%q is both a CSI and a report-only name", s)
		}
		label := PluginLabel(name)
		if label == "" || label != PluginLabel(name) {
			t.Fatalf("PluginLabel(%q) = %q, want a non-empty label that does not change", s, label)
		}
		if ReportOnly(name) && label != PluginISCSI && label != PluginFC {
			t.Fatalf("PluginLabel(%q) = %q for a report-only name, want %s or %s", s, label, PluginISCSI, PluginFC)
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("ParseUniqueName(%q) failed with an empty error", s)
			}
			if driver != "" || handle != "" {
				t.Fatalf("ParseUniqueName(%q) failed but returned %q, %q", s, driver, handle)
			}
			return
		}
		// One volume has one name: the name parsed is the name the volume's parts
		// make, so no two node status entries map to the same driver and handle.
		if got := CSI(driver, handle); got != name {
			t.Fatalf("CSI(ParseUniqueName(%q)) = %q", s, got)
		}
		if driver == "" || handle == "" || strings.Contains(driver, "^") {
			t.Fatalf("ParseUniqueName(%q) = %q, %q: want a non-empty driver without '^' and a non-empty handle", s, driver, handle)
		}
		if !IsCSI(name) || ReportOnly(name) {
			t.Fatalf("%q parsed as CSI but IsCSI = %v, ReportOnly = %v", s, IsCSI(name), ReportOnly(name))
		}
		if want := PluginCSI + ":" + driver; label != want {
			t.Fatalf("PluginLabel(%q) = %q, want %q", s, label, want)
		}
	})
}

// FuzzInTreeName builds the names of in-tree iSCSI and Fibre Channel volumes, as
// kube-controller-manager spells them, and reads them back from node status: they
// must come back as report-only volumes, node status being their only record. The
// lists of WWNs and WWIDs are the fuzzed strings split at commas.
func FuzzInTreeName(f *testing.F) {
	f.Fuzz(func(t *testing.T, portal, iqn string, iscsiLun int32, wwns string, fcLun int32, hasLun bool, wwids string) {
		iscsi := ISCSI(portal, iqn, iscsiLun)
		if want := PluginISCSI + "/" + portal + ":" + iqn + ":" + strconv.FormatInt(int64(iscsiLun), 10); string(iscsi) != want {
			t.Fatalf("ISCSI(%q, %q, %d) = %q, want %q", portal, iqn, iscsiLun, iscsi, want)
		}
		checkReportOnly(t, iscsi, PluginISCSI)

		targets, ids := splitList(wwns), splitList(wwids)
		var lun *int32
		if hasLun {
			lun = &fcLun
		}
		fc, err := FC(targets, lun, ids)
		var want string
		switch {
		case len(targets) > 0 && lun != nil:
			want = PluginFC + "/[" + strings.Join(targets, " ") + "]:" + strconv.FormatInt(int64(fcLun), 10)
		case len(ids) > 0:
			want = PluginFC + "/[" + strings.Join(ids, " ") + "]"
		}
		if want == "" {
			if err == nil || err.Error() == "" {
				t.Fatalf("FC(%q, %v, %q) = %q, %v; want a non-empty error", targets, lun, ids, fc, err)
			}
			return
		}
		if err != nil || string(fc) != want {
			t.Fatalf("FC(%q, %v, %q) = %q, %v; want %q", targets, lun, ids, fc, err, want)
		}
		checkReportOnly(t, fc, PluginFC)
	})
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func checkReportOnly(t *testing.T, name UniqueName, plugin string) {
	t.Helper()
	if !ReportOnly(name) || IsCSI(name) {
		t.Fatalf("%q: ReportOnly = %v, IsCSI = %v, want true, false", name, ReportOnly(name), IsCSI(name))
	}
	if _, _, err := ParseUniqueName(name); err == nil {
		t.Fatalf("ParseUniqueName(%q) parsed an in-tree name as CSI", name)
	}
	if got := PluginLabel(name); got != plugin {
		t.Fatalf("PluginLabel(%q) = %q, want %q", name, got, plugin)
	}
}

// FuzzAttachmentName derives VolumeAttachment names for two volumes on nodes: each
// is a valid object name, and two names are equal exactly when handle, driver and
// node run together are, as in kube-controller-manager, which hashes the same
// string (a different string giving the same name would be a SHA-256 collision).
func FuzzAttachmentName(f *testing.F) {
	f.Fuzz(func(t *testing.T, handle, driver, node, handle2, driver2, node2 string) {
		name := AttachmentName(handle, driver, node)
		if name != AttachmentName(handle, driver, node) {
			t.Fatalf("AttachmentName(%q, %q, %q) gave two names", handle, driver, node)
		}
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			t.Fatalf("AttachmentName(%q, %q, %q) = %q, not a valid object name: %v", handle, driver, node, name, msgs)
		}
		sum := sha256.Sum256([]byte(handle + driver + node))
		if want := "csi-" + hex.EncodeToString(sum[:]); name != want {
			t.Fatalf("AttachmentName(%q, %q, %q) = %q, want %q", handle, driver, node, name, want)
		}
		sameString := handle+driver+node == handle2+driver2+node2
		if same := name == AttachmentName(handle2, driver2, node2); same != sameString {
			t.Fatalf("AttachmentName(%q, %q, %q) and AttachmentName(%q, %q, %q): names equal = %v, strings equal = %v",
				handle, driver, node, handle2, driver2, node2, same, sameString)
		}
	})
}
