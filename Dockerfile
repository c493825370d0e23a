# syntax=docker/dockerfile:1
# osprobe in a container: build with the Rust toolchain, run on a slim Debian
# with the tools the experiments call (ip from iproute2, /bin/true).
#
#   docker build -t osprobe .
#   docker run --rm osprobe list
#   docker run --rm osprobe bench cpu.syscall --no-store
#   docker run --rm --privileged -v osprobe-data:/data osprobe run --profile quick
#
# Which experiments need which privileges: docs/install.md ("Docker").
# The builder and the runtime share one Debian release, so the binary finds
# the glibc it was linked against.
ARG DEBIAN_RELEASE=bookworm

FROM rust:1-slim-${DEBIAN_RELEASE} AS build
# rusqlite's bundled SQLite is compiled with the C compiler.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The registry and target caches outlive a build, so a rebuild after a
# source change recompiles osprobe's crates only. --locked: the versions in
# Cargo.lock, as tested.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p osprobe \
    && install -D -m 0755 target/release/osprobe /out/osprobe

FROM debian:${DEBIAN_RELEASE}-slim
# iproute2: `ip` builds the namespaces and veth pairs of path=netns and the
# link emulator; procps: ps/sysctl for a look around when debugging. mount
# and coreutils (/bin/true for proc.spawn) are in the base image.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iproute2 procps \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/osprobe /usr/local/bin/osprobe
# Results go to the volume at /data (mount one to keep them across runs).
ENV OSPROBE_DB=/data/results.db
VOLUME ["/data"]
WORKDIR /data
ENTRYPOINT ["osprobe"]
CMD ["--help"]
