package explain

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzParseTarget reads explain's KIND/NAME as a person types it on the command
// line, or as the leader's endpoint gets it in a query with a namespace.
func FuzzParseTarget(f *testing.F) {
	kinds := []Kind{Pod, Claim, PV, Node, VolumeAttachment}
	f.Fuzz(func(t *testing.T, s, namespace string) {
		got, err := ParseTarget(s, namespace)
		again, errAgain := ParseTarget(s, namespace)
		if got != again || (err == nil) != (errAgain == nil) {
			t.Fatalf("ParseTarget(%q, %q) is not deterministic", s, namespace)
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("ParseTarget(%q, %q) failed with an empty error", s, namespace)
			}
			if got != (Target{}) {
				t.Fatalf("ParseTarget(%q, %q) failed but returned %+v", s, namespace, got)
			}
			return
		}
		if !slices.Contains(kinds, got.Kind) {
			t.Fatalf("ParseTarget(%q, %q) gave kind %q", s, namespace, got.Kind)
		}
		if msgs := validation.IsDNS1123Subdomain(got.Name); len(msgs) > 0 {
			t.Fatalf("ParseTarget(%q, %q) accepted %q, which no object can be named: %v", s, namespace, got.Name, msgs)
		}
		namespaced := got.Kind == Pod || got.Kind == Claim
		switch {
		case namespaced && got.Namespace != namespace, !namespaced && got.Namespace != "":
			t.Fatalf("ParseTarget(%q, %q) gave namespace %q", s, namespace, got.Namespace)
		case got.Namespace != "" && len(validation.IsDNS1123Label(got.Namespace)) > 0:
			t.Fatalf("ParseTarget(%q, %q) accepted namespace %q, which no namespace can be named", s, namespace, got.Namespace)
		}
		// explain --from-leader sends KIND/NAME and the namespace; the leader must
		// read back the same target.
		sent, err := ParseTarget(string(got.Kind)+"/"+got.Name, got.Namespace)
		if err != nil || sent != got {
			t.Fatalf("ParseTarget(%q, %q) = %+v, but the target sent to the leader reads back as %+v, %v", s, namespace, got, sent, err)
		}
	})
}
