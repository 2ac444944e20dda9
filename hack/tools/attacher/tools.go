//go:build tools

// Package tools pins the CSI external-attacher that the end-to-end suite and the
// demo run beside the controller. It lives in its own module because its go.mod
// carries replace lines that `go install` refuses.
package tools

import _ "github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher"
