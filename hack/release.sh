#!/usr/bin/env bash
# Builds the artifacts of a release into one directory, pushing nothing:
#   hack/release.sh VERSION [OUTDIR]      (OUTDIR defaults to _output/release/VERSION)
#
#   attachdetach-controller_VERSION_linux_{amd64,arm64}     the controller
#   kubectl-attachdetach_VERSION_{linux,darwin}_{amd64,arm64}.tar.gz,
#   kubectl-attachdetach_VERSION_windows_{amd64,arm64}.zip  the kubectl plugin
#                                           (kubectl-attachdetach[.exe], LICENSE, and
#                                           plugins/kubectl_complete-attachdetach
#                                           if it exists, but on Windows)
#   install.yaml                            manifests/ rendered, image pinned to VERSION
#   attachdetach-controller-X.Y.Z.tgz       the Helm chart, version VERSION without v
#   attachdetach.yaml                       the krew manifest, if plugins/attachdetach.yaml
#                                           exists, with {{VERSION}} and
#                                           {{SHA256_<os>_<arch>}} filled in
#   attachdetach-controller_VERSION_image.oci.tar
#                                           the image for linux/amd64 and linux/arm64,
#                                           only where docker buildx works
#   sha256sums.txt                          the SHA-256 of every file above
#
# VERSION is a semantic version with a leading v, such as v0.1.0. The binaries carry
# it and the commit (pkg/version). RELEASE_PLATFORMS, a space-separated list of
# OS/ARCH, builds only those of the platforms above (the tests build one); the
# default is all of them. KREW_TEMPLATE names another krew manifest template.
# Needs Go, git, GNU tar and coreutils (Linux), and zip for the Windows archives.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

usage() {
	echo "usage: hack/release.sh VERSION [OUTDIR]   (VERSION like v0.1.0)" >&2
	exit 2
}
[ $# -ge 1 ] && [ $# -le 2 ] || usage
version=$1
if ! [[ $version =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]]; then
	echo "hack/release.sh: VERSION must be a semantic version with a leading v, such as v0.1.0; got $version" >&2
	exit 2
fi
out=${2:-_output/release/$version}
mkdir -p "$out"
out=$(cd "$out" && pwd)

all_platforms="linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64"
platforms=${RELEASE_PLATFORMS:-$all_platforms}
for p in $platforms; do
	[[ " $all_platforms " == *" $p "* ]] || { echo "hack/release.sh: unknown platform $p in RELEASE_PLATFORMS; known: $all_platforms" >&2; exit 2; }
done
krew_template=${KREW_TEMPLATE:-plugins/attachdetach.yaml}
completion=plugins/kubectl_complete-attachdetach

commit=$(git rev-parse HEAD)
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
	echo "hack/release.sh: the checkout has uncommitted changes; the binaries say commit $commit-dirty" >&2
	commit=$commit-dirty
fi
module=github.com/attachdetach-controller/attachdetach-controller
ldflags="-s -w -X $module/pkg/version.Version=$version -X $module/pkg/version.GitCommit=$commit"
# The image the manifests name, from the base's images: entry.
image=$(awk '$1 == "newName:" { print $2 }' manifests/kustomization.yaml)

began=$SECONDS
step() { echo "--- $* ($((SECONDS - began))s)" >&2; }

# install.yaml and the packaged chart get VERSION whatever the checkout says, but
# `kubectl apply -k ...?ref=VERSION` and the chart's default tag read these files at
# the tag: they must name VERSION before it is tagged.
base_tag=$(awk '$1 == "newTag:" { print $2 }' manifests/kustomization.yaml)
app_version=$(awk '$1 == "appVersion:" { print $2 }' charts/attachdetach-controller/Chart.yaml)
if [ "$base_tag" != "$version" ] || [ "$app_version" != "$version" ]; then
	echo "hack/release.sh: warning: manifests/kustomization.yaml pins $base_tag and Chart.yaml's appVersion is $app_version, not $version; set both (and Chart.yaml's version) before tagging $version" >&2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One build per platform serves both the controller and the plugin: they are the
# same program, which runs explain when called as kubectl-attachdetach.
for p in $platforms; do
	os=${p%/*} arch=${p#*/}
	step "building $os/$arch"
	exe=""
	[ "$os" = windows ] && exe=.exe
	mkdir -p "$work/$os-$arch"
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "$ldflags" \
		-o "$work/$os-$arch/kubectl-attachdetach$exe" ./cmd/attachdetach-controller
	if [ "$os" = linux ]; then
		cp "$work/$os-$arch/kubectl-attachdetach" "$out/attachdetach-controller_${version}_${os}_${arch}"
	fi
	cp LICENSE "$work/$os-$arch/"
	files=(LICENSE "kubectl-attachdetach$exe")
	# kubectl's completion hook for the plugin, a shell script: not for Windows.
	if [ -f "$completion" ] && [ "$os" != windows ]; then
		cp "$completion" "$work/$os-$arch/"
		files+=("$(basename "$completion")")
	fi
	name=kubectl-attachdetach_${version}_${os}_${arch}
	# Archives whose bytes depend only on the inputs: fixed order, owner and time.
	touch -d "@$(git log -1 --format=%ct)" "$work/$os-$arch"/*
	if [ "$os" = windows ]; then
		command -v zip >/dev/null || { echo "hack/release.sh: zip is needed for the Windows archives (apt-get install zip)" >&2; exit 1; }
		rm -f "$out/$name.zip"
		(cd "$work/$os-$arch" && zip -q -X "$out/$name.zip" "${files[@]}")
	else
		tar -C "$work/$os-$arch" --sort=name --owner=0 --group=0 --numeric-owner \
			-cf - "${files[@]}" | gzip -n >"$out/$name.tar.gz"
	fi
done

step "rendering install.yaml"
kubectl=$(hack/build-tools.sh kubectl)
mkdir -p "$work/install"
# kustomize takes relative paths only.
cat >"$work/install/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $(realpath --relative-to="$work/install" "$root/manifests")
images:
  - name: $image
    newTag: $version
EOF
"$kubectl" kustomize "$work/install" >"$out/install.yaml"

step "packaging the Helm chart"
helm=$(hack/build-tools.sh helm)
"$helm" lint --quiet charts/attachdetach-controller >&2
"$helm" package charts/attachdetach-controller --version "${version#v}" --app-version "$version" \
	--destination "$out" >&2

if [ -f "$krew_template" ]; then
	step "rendering the krew manifest from $krew_template"
	sed_args=(-e "s/{{VERSION}}/$version/g")
	for p in $platforms; do
		os=${p%/*} arch=${p#*/}
		ext=tar.gz
		[ "$os" = windows ] && ext=zip
		sum=$(sha256sum "$out/kubectl-attachdetach_${version}_${os}_${arch}.$ext" | cut -d' ' -f1)
		sed_args+=(-e "s/{{SHA256_${os}_${arch}}}/$sum/g")
	done
	sed "${sed_args[@]}" "$krew_template" >"$out/attachdetach.yaml"
	if grep -n '{{' "$out/attachdetach.yaml" >&2; then
		if [ "$platforms" = "$all_platforms" ]; then
			echo "hack/release.sh: placeholders left in the krew manifest (above)" >&2
			exit 1
		fi
		echo "hack/release.sh: RELEASE_PLATFORMS left the placeholders above unfilled" >&2
	fi
else
	step "no $krew_template: no krew manifest"
fi

if docker buildx version >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
	step "building the image for linux/amd64 and linux/arm64"
	docker buildx build --platform linux/amd64,linux/arm64 \
		--build-arg VERSION="$version" --build-arg GIT_COMMIT="$commit" \
		--tag "$image:$version" \
		--output "type=oci,dest=$out/attachdetach-controller_${version}_image.oci.tar" .
else
	step "docker buildx is not available here (or its daemon is not running): no image tarball"
	echo "    build and push the image where it is: docker buildx build --platform linux/amd64,linux/arm64 --build-arg VERSION=$version --build-arg GIT_COMMIT=$commit --tag $image:$version --push ." >&2
fi

step "sums"
(cd "$out" && find . -maxdepth 1 -type f ! -name sha256sums.txt -printf '%f\n' | LC_ALL=C sort | xargs sha256sum >sha256sums.txt)
step "done: $out"
ls -l "$out" >&2
