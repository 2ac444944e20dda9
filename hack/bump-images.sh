#!/usr/bin/env bash
# Re-resolves every image pinned by digest in the repository's build and deploy
# files to the digest its tag points to now, and rewrites the pins:
#
#   hack/bump-images.sh            # rewrite the files
#   hack/bump-images.sh --check    # only list the pins that moved; exit 1 if any
#
# A pin is written IMAGE:TAG@sha256:DIGEST; the tag says what the image is, the
# digest decides which bytes are pulled. Needs a registry and `crane` (go-containerregistry)
# or `docker buildx imagetools`; the digest of a multi-platform image is that of
# its index, so every platform stays pinned. Review the diff and commit it.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The files that pin images. The controller's own image is not among the pins:
# its digest exists only once a release is pushed (hack/release.sh).
files=(Dockerfile)
for f in charts/attachdetach-controller/values.yaml; do
	[[ -f $f ]] && files+=("$f")
done

check=false
case "${1:-}" in
--check) check=true ;;
"") ;;
*)
	echo "usage: $0 [--check]" >&2
	exit 2
	;;
esac

if command -v crane >/dev/null 2>&1; then
	resolve() { crane digest "$1"; }
elif command -v docker >/dev/null 2>&1 && docker buildx imagetools inspect --help >/dev/null 2>&1; then
	resolve() { docker buildx imagetools inspect --format '{{.Manifest.Digest}}' "$1"; }
else
	echo "$0: neither crane nor docker buildx imagetools is installed; install one (go install github.com/google/go-containerregistry/cmd/crane@latest) and run this where the registries are reachable" >&2
	exit 1
fi

pin='[A-Za-z0-9][A-Za-z0-9./_-]*:[A-Za-z0-9._-]+@sha256:[0-9a-f]{64}'
moved=0
for ref in $(grep -ohE "$pin" "${files[@]}" | sort -u); do
	image=${ref%@*}
	old=${ref#*@}
	if ! new=$(resolve "$image"); then
		echo "$0: cannot resolve $image" >&2
		exit 1
	fi
	if [[ ! $new =~ ^sha256:[0-9a-f]{64}$ ]]; then
		echo "$0: $image resolved to $new, not a sha256 digest" >&2
		exit 1
	fi
	if [[ $new == "$old" ]]; then
		echo "$image: $old (unchanged)"
		continue
	fi
	moved=1
	echo "$image: $old -> $new"
	if ! $check; then
		sed -i "s|$image@$old|$image@$new|g" "${files[@]}"
	fi
done
if $check && ((moved)); then
	exit 1
fi
