#!/usr/bin/env bash
# Runs every test: vet, the unit tests, the integration suite against a real
# kube-apiserver and etcd, the end-to-end suite with the real CSI external-attacher,
# and the small benchmark run. Installs etcd (Debian's etcd-server), gcc, git and zip
# when missing, and builds and caches kube-apiserver, kubectl, kube-controller-manager,
# csi-attacher and promtool, hollow-kubelet (the real kubelet with a fake runtime, for the
# end-to-end suite) and helm (for the chart's tests and hack/release.sh's).
set -euo pipefail
cd "$(dirname "$0")/.."

# What the tests run besides Go, by command and the Debian package that has it:
# etcd for the API server, gcc for the race detector (cgo), git and zip for the
# release test (hack/release.sh).
missing=()
for need in etcd:etcd-server gcc:gcc git:git zip:zip; do
	command -v "${need%%:*}" >/dev/null 2>&1 || missing+=("${need#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "missing, and this is not root: run apt-get install ${missing[*]}" >&2
		exit 1
	fi
	echo "--- installing ${missing[*]} (Debian packages)"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq "${missing[@]}" >/dev/null
fi
echo "--- building the upstream tools the tests run (cached after the first time)"
hack/build-tools.sh >/dev/null
echo "--- go vet"
go vet ./...
echo "--- go test -race ./pkg/... (the controller's own packages, under the race detector)"
go test -race -count=1 -timeout 10m ./pkg/...
echo "--- go test"
go test -count=1 -timeout 25m "$@" ./...
