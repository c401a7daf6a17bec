# syntax=docker/dockerfile:1
# gpulens: the collector (`gpulens`) and the node agent (`gpulens-agent`) in one image, for
# amd64 and arm64 alike (no architecture-specific step):
#   docker buildx build --platform linux/amd64,linux/arm64 -t REGISTRY/gpulens:TAG --push .
# docs/deploy.md says how to build, push and point the Helm chart at it (image.repository).
FROM rust:1.95-bookworm AS build
WORKDIR /src
# 1. Dependencies, in a layer of their own: only the manifests and the lock file, each crate's
#    sources stubbed, so this layer is rebuilt only when Cargo.lock or a manifest changes.
COPY Cargo.toml Cargo.lock ./
COPY .cargo .cargo
COPY agent/Cargo.toml agent/
COPY analytics/Cargo.toml analytics/
COPY collector/Cargo.toml collector/
COPY collector-shared/Cargo.toml collector-shared/
COPY bench/Cargo.toml bench/
COPY testing/fake-nvml/Cargo.toml testing/fake-nvml/
COPY ingest-client/Cargo.toml ingest-client/
COPY intake/Cargo.toml intake/
COPY testing/kube-standin/Cargo.toml testing/kube-standin/
COPY listener/Cargo.toml listener/
COPY model/Cargo.toml model/
COPY simulator/Cargo.toml simulator/
COPY store/Cargo.toml store/
COPY testing/gpu-load/Cargo.toml testing/gpu-load/
COPY testing/checks/Cargo.toml testing/checks/
COPY testing/support/Cargo.toml testing/support/
COPY web/Cargo.toml web/
RUN crates="agent analytics bench collector collector-shared ingest-client intake listener model simulator store testing/checks testing/fake-nvml testing/gpu-load testing/kube-standin testing/support web" \
 && for d in $crates; do mkdir -p "$d/src" && touch "$d/src/lib.rs"; done \
 && cargo fetch --locked \
 && for d in $crates; do rm -r "$d/src"; done
# 2. The workspace. The target directory is a BuildKit cache, so a source change recompiles
#    only what it touches; the binaries are copied out of it, without debug info.
COPY . .
RUN --mount=type=cache,target=/src/target,sharing=locked \
    CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=symbols \
    cargo build --release --locked --bin gpulens --bin gpulens-agent \
 && install -D -m 0755 target/release/gpulens target/release/gpulens-agent -t /out

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/gpulens /out/gpulens-agent /usr/local/bin/
COPY scenarios /usr/share/gpulens/scenarios
# Non-root by default (the collector). The agent's DaemonSet runs it as root without privilege
# and with two capabilities (docs/security.md): the kubelet's pod-resources socket is root's.
USER 65532:65532
EXPOSE 8080 9402
ENTRYPOINT ["gpulens"]
CMD ["serve"]
