#!/usr/bin/env bash
# Runs the attachdetach-controller for real; see `hack/run.sh --help`.
#   Without KUBECONFIG: a local cluster (etcd, kube-apiserver, CSI test driver,
#   csi-attacher, three hollow nodes running the real kubelet, the controller) and a
#   demo, until Ctrl-C.
#   With KUBECONFIG: the controller against that cluster, with leader election.
# Builds what it needs on first use and caches it (the upstream tools and
# hollow-kubelet take 45 to 90 minutes on 2 cores the first time; hack/build-tools.sh
# tells each build as it starts and ends).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

if ! command -v go >/dev/null 2>&1; then
	echo "hack/run.sh needs Go (https://go.dev/dl/) to build the controller and the tools" >&2
	exit 1
fi
bin=${XDG_CACHE_HOME:-$HOME/.cache}/attachdetach-controller/bin
mkdir -p "$bin"
# Built from the repository root, run from the caller's directory so that a relative
# KUBECONFIG keeps working.
[ -x "$bin/localup" ] || echo "Building hack/localup (first time only; a few minutes with a cold Go build cache)" >&2
(cd "$root" && go build -o "$bin/localup" ./hack/localup)
exec "$bin/localup" "$@"
