# gpulens: the collector (`gpulens`) and the node agent (`gpulens-agent`) in one image.
# docker build -t gpulens:local .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin gpulens --bin gpulens-agent

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/gpulens /src/target/release/gpulens-agent /usr/local/bin/
COPY scenarios /usr/share/gpulens/scenarios
# The collector runs unprivileged; the agent's DaemonSet/Compose service runs it as root to
# read other processes' /proc entries in the host PID namespace.
USER 65532:65532
EXPOSE 8080 9402
ENTRYPOINT ["gpulens"]
CMD ["serve"]
