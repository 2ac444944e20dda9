#!/usr/bin/env bash
# Builds the upstream binaries the tests, the demo and the benchmark run, once, into a
# cache outside the repository, and prints the path of each, one a line.
#   hack/build-tools.sh [kube-apiserver] [kube-controller-manager] [kubectl] [csi-attacher] [promtool] [hollow-kubelet] [helm]
# With no arguments it builds all of them. Set ADC_TOOLS_DIR to choose the cache.
# Their versions are pinned in hack/tools/versions. Each build says on standard error
# when it starts and how long it took; what is cached already is not built again.
# hollow-kubelet is this repository's command in hack/tools/hollow-kubelet, the real
# kubelet of k8s.io/kubernetes with a fake runtime; its cached name carries a hash of
# its source and of hack/tools/go.mod and go.sum, so a change to either builds it anew.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tools/versions
. "$here/tools/versions"
k8s_minor=${KUBERNETES_VERSION#v1.}
k8s_minor=${k8s_minor%%.*}
cache=${ADC_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/attachdetach-controller/tools}
bin="$cache/bin"
mkdir -p "$bin"

# require_version fails unless the go.mod in dir requires module at version.
require_version() {
	local dir=$1 module=$2 version=$3 required
	required=$(awk -v m="$module" '{ sub(/^[ \t]*require[ \t]+/, "") } $1 == m { print $2 }' "$dir/go.mod")
	if [ "$required" != "$version" ]; then
		echo "hack/tools/versions pins $module $version, but $dir/go.mod requires ${required:-nothing}:" >&2
		echo "  (cd $dir && go get $module@$version && go mod tidy)" >&2
		exit 1
	fi
}

# build builds one command of the module in dir into $bin/name-version, telling when
# it starts and how long it took.
build() {
	local name=$1 version=$2 dir=$3 pkg=$4 ldflags=$5 out="$bin/$1-$2" began=$SECONDS
	if [ -x "$out" ]; then
		echo "$out"
		return 0
	fi
	echo "building $name $version (first time only; the first Kubernetes command built takes longest, 9 to 30 minutes on 2 cores, and the others reuse most of its compiled packages)" >&2
	(cd "$dir" && CGO_ENABLED=0 go build -trimpath -o "$out.tmp" -ldflags "$ldflags" "$pkg")
	mv "$out.tmp" "$out"
	local took=$((SECONDS - began))
	echo "built $name $version in $((took / 60))m$((took % 60))s" >&2
	echo "$out"
}

build_k8s() {
	require_version "$here/tools" k8s.io/kubernetes "$KUBERNETES_VERSION"
	build "$1" "$KUBERNETES_VERSION" "$here/tools" "k8s.io/kubernetes/cmd/$1" \
		"-s -w -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$k8s_minor"
}

build_hollow_kubelet() {
	require_version "$here/tools" k8s.io/kubernetes "$KUBERNETES_VERSION"
	local sum
	sum=$(cd "$here/tools" && cat hollow-kubelet/*.go go.mod go.sum | sha256sum | cut -c1-12)
	build hollow-kubelet "$KUBERNETES_VERSION-$sum" "$here/tools" ./hollow-kubelet \
		"-s -w -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$k8s_minor"
}

build_attacher() {
	require_version "$here/tools/attacher" github.com/kubernetes-csi/external-attacher/v4 "$EXTERNAL_ATTACHER_VERSION"
	build csi-attacher "$EXTERNAL_ATTACHER_VERSION" "$here/tools/attacher" \
		github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher "-s -w -X main.version=$EXTERNAL_ATTACHER_VERSION"
}

build_helm() {
	require_version "$here/tools/helm" helm.sh/helm/v4 "$HELM_VERSION"
	build helm "$HELM_VERSION" "$here/tools/helm" helm.sh/helm/v4/cmd/helm \
		"-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
}

build_promtool() {
	require_version "$here/tools/prometheus" github.com/prometheus/prometheus "$PROMETHEUS_VERSION"
	build promtool "$PROMETHEUS_VERSION" "$here/tools/prometheus" github.com/prometheus/prometheus/cmd/promtool "-s -w"
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(kube-apiserver kube-controller-manager kubectl csi-attacher promtool hollow-kubelet helm)
for t in "${targets[@]}"; do
	case "$t" in
	kube-apiserver | kube-controller-manager | kubectl | csi-attacher | promtool | hollow-kubelet | helm) ;;
	*) echo "unknown tool $t" >&2; exit 2 ;;
	esac
done
for t in "${targets[@]}"; do
	case "$t" in
	csi-attacher) build_attacher ;;
	promtool) build_promtool ;;
	helm) build_helm ;;
	hollow-kubelet) build_hollow_kubelet ;;
	*) build_k8s "$t" ;;
	esac
done
