// Package kubectl runs the kubectl that hack/build-tools.sh builds (see
// internal/binaries), at the version of the API server the suites and the demo run,
// against one kubeconfig.
package kubectl

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Kubectl is a kubectl executable and the kubeconfig it uses.
type Kubectl struct {
	Binary, Kubeconfig string
}

// Run runs kubectl with args and input on its standard input, and returns its
// standard output and standard error. When kubectl fails, the error includes its
// standard error.
func (k Kubectl) Run(ctx context.Context, input string, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, k.Binary, append([]string{"--kubeconfig=" + k.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(input)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), errOut.String(), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), errOut.String(), nil
}
