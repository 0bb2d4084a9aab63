# The manager image: the static manager binary on an empty base, running as the numeric
# non-root user 65532 (restricted Pod Security). Built for any TARGETPLATFORM; the
# daemonless build (make docker-build, hack/olm/images) makes the same image for
# linux/amd64 and linux/arm64 without a container runtime; test/dockerfiles (make test)
# builds this file with buildah for both platforms and fails when it does not build or
# when its image and that build's differ (configuration, files, modes, owners, contents).
FROM --platform=$BUILDPLATFORM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH
WORKDIR /workspace
COPY go.mod go.sum ./
RUN go mod download
COPY *.go ./
COPY api/ api/
COPY controllers/ controllers/
COPY internal/ internal/
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -buildvcs=false -ldflags="-s -w" -o /out/manager .

FROM scratch
ARG VERSION
ARG REVISION
COPY hack/olm/images/rootfs/ /
COPY --from=builder /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
LABEL org.opencontainers.image.title=phalanks-operator \
      org.opencontainers.image.source=https://github.com/phalanks/phalanks-operator \
      org.opencontainers.image.licenses=Apache-2.0 \
      org.opencontainers.image.version=$VERSION \
      org.opencontainers.image.revision=$REVISION
