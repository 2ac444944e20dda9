#!/usr/bin/env bash
# Runs every test: vet, the unit tests, the integration suite against a real
# kube-apiserver and etcd, the end-to-end suite with the real CSI external-attacher,
# and the small benchmark run. Needs etcd on the PATH (Debian: etcd-server); builds
# and caches kube-apiserver, kubectl, kube-controller-manager and csi-attacher itself.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v etcd >/dev/null 2>&1; then
	echo "etcd is not installed: apt-get install etcd-server" >&2
	exit 1
fi
echo "--- building the upstream tools the tests run (cached after the first time)"
hack/build-tools.sh >/dev/null
echo "--- go vet"
go vet ./...
echo "--- go test"
go test -count=1 -timeout 25m "$@" ./...
