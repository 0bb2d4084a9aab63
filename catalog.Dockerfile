# The catalog image: opm serving the file-based catalog in catalog/ over gRPC on port 50051,
# the way OLM's catalog operator runs a registry pod (the image's entrypoint and command,
# exec probes `grpc_health_probe -addr=:50051`), with the serve cache pre-built so the pod
# serves at once. opm is built from operator-registry at the release the catalog is
# rendered and validated with (hack/tools/opm pins it), without cgo: a static binary runs
# on an empty base, and serving a file-based catalog needs none of opm's sqlite code. The
# daemonless build (make catalog-build, hack/olm/images) makes the same image for
# linux/amd64 and linux/arm64, and a test fails when the two disagree.
FROM --platform=$BUILDPLATFORM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH
WORKDIR /workspace
COPY hack/tools/opm/ hack/tools/opm/
COPY hack/tools/healthprobe/ hack/tools/healthprobe/
RUN cd hack/tools/opm && CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -buildvcs=false -ldflags="-s -w" -tags=containers_image_openpgp -o /out/opm github.com/operator-framework/operator-registry/cmd/opm
RUN cd hack/tools/healthprobe && CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -buildvcs=false -ldflags="-s -w" -o /out/grpc_health_probe github.com/grpc-ecosystem/grpc-health-probe
# The serve cache, in operator-registry's JSON format (reproducible, and only read when
# opm serves): the same on every platform, so it is built for the build platform. Its
# digest covers the modes of the catalog's files and its own, which COPY keeps.
COPY catalog/ /configs/
RUN cd hack/tools/opm && go run ./servecache /configs /out/cache

FROM scratch
COPY hack/olm/images/rootfs/ /
COPY --from=builder /out/opm /bin/opm
COPY --from=builder /out/grpc_health_probe /bin/grpc_health_probe
COPY catalog/ /configs/
# OLM runs registry pods as user 1001 under restricted Pod Security, and as the image's
# user otherwise; the cache (0750/0640) belongs to that user and to group 0.
COPY --from=builder --chown=1001:0 /out/cache /tmp/cache
USER 1001
EXPOSE 50051
ENTRYPOINT ["/bin/opm"]
CMD ["serve", "/configs", "--cache-dir=/tmp/cache"]
# Where opm and tooling find the catalog in this image.
LABEL operators.operatorframework.io.index.configs.v1=/configs
