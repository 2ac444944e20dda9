package watchrecord

import "testing"

func TestAtLeastVersionComparesResourceVersions(t *testing.T) {
	tests := []struct {
		have, want string
		ok         bool
	}{
		{"7", "5", true},
		{"7", "7", true},
		{"5", "7", false},
		{"10", "9", true},
		{"x1", "x1", true},
		{"x1", "x2", false},
		{"x2", "x1", false},
	}
	for _, tc := range tests {
		if got := AtLeastVersion(tc.have, tc.want); got != tc.ok {
			t.Errorf("AtLeastVersion(%q, %q) = %t, want %t", tc.have, tc.want, got, tc.ok)
		}
	}
}
