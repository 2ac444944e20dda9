# syntax=docker/dockerfile:1@sha256:ecfaec9ed6d810b56388c508f4121597bfbba70d41a6dfeee4d8cad5f295fc32
#
# Image of the standalone attach/detach controller.
#
#   docker build --build-arg VERSION=v0.1.0 --build-arg GIT_COMMIT=$(git rev-parse HEAD) \
#     -t ghcr.io/attachdetach-controller/attachdetach-controller:v0.1.0 .
#
# Multi-platform: docker buildx build --platform linux/amd64,linux/arm64 ...
# (hack/release.sh does, where buildx works).
# The builder always runs on the build machine's platform and cross-compiles,
# which is fast and needs no emulation (the binary is pure Go, CGO_ENABLED=0).
#
# Every image is pinned by digest (the index of all its platforms), the tag kept
# beside it to say what it is: a rebuild pulls the same bytes, and a new base is
# a reviewable commit. hack/bump-images.sh re-resolves the tags and rewrites the
# digests; it needs a registry.

FROM --platform=$BUILDPLATFORM golang:1.26.5@sha256:3aff6657219a4d9c14e27fb1d8976c49c29fddb70ba835014f477e1c70636647 AS builder

WORKDIR /src

# Modules first, in their own layer: rebuilt only when go.mod or go.sum change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download

COPY . .

ARG TARGETOS=linux
ARG TARGETARCH
ARG VERSION=dev
# The build context has no .git to stamp the commit from; without the argument the
# binary reports commit "unknown".
ARG GIT_COMMIT=
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath \
      -ldflags "-s -w -X github.com/attachdetach-controller/attachdetach-controller/pkg/version.Version=${VERSION} -X github.com/attachdetach-controller/attachdetach-controller/pkg/version.GitCommit=${GIT_COMMIT}" \
      -o /out/attachdetach-controller \
      ./cmd/attachdetach-controller

# Static, no shell, no package manager; the nonroot variant already runs as
# 65532, set again here so the image says so itself and matches the
# Deployment's securityContext.
FROM gcr.io/distroless/static-debian12:nonroot@sha256:d093aa3e30dbadd3efe1310db061a14da60299baff8450a17fe0ccc514a16639

COPY --from=builder /out/attachdetach-controller /attachdetach-controller

USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/attachdetach-controller"]
