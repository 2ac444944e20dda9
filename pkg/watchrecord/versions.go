package watchrecord

import "k8s.io/apimachinery/pkg/util/resourceversion"

// AtLeastVersion tells whether an object at resourceVersion have is the one at
// want or a later one. Resource versions of one resource are ordered; two that
// cannot be compared must be the same.
func AtLeastVersion(have, want string) bool {
	cmp, err := resourceversion.CompareResourceVersion(have, want)
	if err != nil {
		return have == want
	}
	return cmp >= 0
}
