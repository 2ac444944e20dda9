package manifest

import (
	"strings"
	"testing"
)

func TestDecodeReadsEveryDocumentAndSkipsEmptyOnes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream string
		kinds  []string
		err    string
	}{
		{name: "none", stream: ""},
		{name: "two with an empty one between", stream: "kind: A\n---\n---\nkind: B\n", kinds: []string{"A", "B"}},
		{name: "json", stream: `{"kind": "A"}`, kinds: []string{"A"}},
		{name: "broken second", stream: "kind: A\n---\nkind: [\n", err: "decoding document 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Decode(tc.stream)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Decode error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, o.GetKind())
			}
			if strings.Join(kinds, ",") != strings.Join(tc.kinds, ",") {
				t.Errorf("kinds %v, want %v", kinds, tc.kinds)
			}
		})
	}
}
