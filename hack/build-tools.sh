#!/usr/bin/env bash
# Builds the upstream binaries the tests, the demo and the benchmark run, once, into a
# cache outside the repository, and prints the directory that holds them.
#   hack/build-tools.sh [kube-apiserver] [kube-controller-manager] [kubectl] [csi-attacher]
# With no arguments it builds all of them. Set ADC_TOOLS_DIR to choose the cache.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
k8s_version=v1.37.1
attacher_version=v4.13.0
cache=${ADC_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/attachdetach-controller/tools}
bin="$cache/bin"
mkdir -p "$bin"

# build_k8s builds the missing ones of the given k8s.io/kubernetes commands in one
# go build, so that the packages they share are compiled once.
build_k8s() {
	local missing=() name
	for name in "$@"; do
		[ -x "$bin/$name-$k8s_version" ] || missing+=("$name")
	done
	[ ${#missing[@]} -gt 0 ] || return 0
	echo "building ${missing[*]} $k8s_version (first time only, a few minutes)" >&2
	local tmp pkgs=()
	tmp=$(mktemp -d "$cache/build.XXXXXX")
	for name in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$name"); done
	(cd "$here/tools" && CGO_ENABLED=0 go build -trimpath -o "$tmp/" \
		-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37" \
		"${pkgs[@]}")
	for name in "${missing[@]}"; do mv "$tmp/$name" "$bin/$name-$k8s_version"; done
	rm -rf "$tmp"
}

build_attacher() {
	local out="$bin/csi-attacher-$attacher_version"
	[ -x "$out" ] && return 0
	echo "building csi-attacher $attacher_version (first time only)" >&2
	(cd "$here/tools/attacher" && CGO_ENABLED=0 go build -trimpath -o "$out.tmp" \
		-ldflags "-s -w -X main.version=$attacher_version" \
		github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher)
	mv "$out.tmp" "$out"
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(kube-apiserver kube-controller-manager kubectl csi-attacher)
k8s=()
for t in "${targets[@]}"; do
	case "$t" in
	kube-apiserver | kube-controller-manager | kubectl) k8s+=("$t") ;;
	csi-attacher) ;;
	*) echo "unknown tool $t" >&2; exit 2 ;;
	esac
done
[ ${#k8s[@]} -eq 0 ] || build_k8s "${k8s[@]}"
for t in "${targets[@]}"; do
	[ "$t" != csi-attacher ] || build_attacher
done
echo "$bin"
