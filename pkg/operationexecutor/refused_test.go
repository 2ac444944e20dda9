package operationexecutor

import (
	"errors"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TestRefusedTellsTheAnswersThatChangedNothing: an answer by which the API
// server refused the request proves that nothing was written, and only such an
// answer does: a create it refused is forgotten, while any other error leaves
// the object possibly made.
func TestRefusedTellsTheAnswersThatChangedNothing(t *testing.T) {
	resource := storagev1.Resource("volumeattachments")
	kind := storagev1.SchemeGroupVersion.WithKind("VolumeAttachment").GroupKind()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"429 TooManyRequests", apierrors.NewTooManyRequests("slow down", 1), true},
		{"422 Invalid", apierrors.NewInvalid(kind, testVAName, field.ErrorList{field.Required(field.NewPath("spec", "attacher"), "")}), true},
		{"400 BadRequest", apierrors.NewBadRequest("bad"), true},
		{"403 Forbidden", apierrors.NewForbidden(resource, testVAName, errors.New("denied")), true},
		{"401 Unauthorized", apierrors.NewUnauthorized("token expired"), true},
		{"405 MethodNotSupported", apierrors.NewMethodNotSupported(resource, "create"), true},
		{"406 NotAcceptable", apierrors.NewGenericServerResponse(406, "create", resource, testVAName, "", 0, false), true},
		{"413 RequestEntityTooLarge", apierrors.NewRequestEntityTooLargeError("too large"), true},
		{"415 UnsupportedMediaType", apierrors.NewGenericServerResponse(415, "create", resource, testVAName, "", 0, false), true},
		{"500 InternalError", apierrors.NewInternalError(errors.New("etcd leader changed")), false},
		{"503 ServiceUnavailable", apierrors.NewServiceUnavailable("shutting down"), false},
		{"504 Timeout", apierrors.NewTimeoutError("slow", 1), false},
		{"409 Conflict", apierrors.NewConflict(resource, testVAName, errors.New("uid mismatch")), false},
		{"404 NotFound", apierrors.NewNotFound(resource, testVAName), false},
		{"connection lost", connectionReset, false},
		{"no answer yet", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := refused(tc.err); got != tc.want {
				t.Errorf("refused(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
