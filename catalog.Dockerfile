# The catalog image: opm serving the file-based catalog in catalog/ over gRPC, with its
# cache pre-built so the pod starts serving at once. opm matches the operator-registry
# release the catalog is rendered and validated with (hack/olm/go.mod).
FROM quay.io/operator-framework/opm:v1.72.0

ENTRYPOINT ["/bin/opm"]
CMD ["serve", "/configs", "--cache-dir=/tmp/cache"]

ADD catalog /configs
RUN ["/bin/opm", "serve", "/configs", "--cache-dir=/tmp/cache", "--cache-only"]

# Where opm and tooling find the catalog in this image.
LABEL operators.operatorframework.io.index.configs.v1=/configs
