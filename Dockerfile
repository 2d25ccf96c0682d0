# The gpumeter agent's image. No "# syntax=" line: that pulls a frontend
# image, and the builder must work with the engine's own (BuildKit or the
# classic builder, Docker 20.10 and later).
#
#   docker build -t gpumeter:1.2.3 \
#     --build-arg VERSION=1.2.3 --build-arg COMMIT=$(git rev-parse HEAD) \
#     --build-arg BUILD_DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ) .
#
# The binary needs glibc (cgo, for NVML through dlopen), so the image is a
# small glibc base, not scratch. BUILDER and BASE name the two images, for
# a mirror or a pinned digest; keep their glibc releases in step (the
# binary runs on a glibc as new as the builder's or newer).
#
# Without a registry, or with a binary built elsewhere, the target
# "prebuilt" takes it from the build context instead of compiling:
#
#   docker build --target prebuilt --build-arg BINARY=gpumeter \
#     --build-arg BASE=my-glibc-base -t gpumeter:dev .
#
# How to run it is in the README ("Running it on a GPU host").

ARG BUILDER=golang:1.26-bookworm
ARG BASE=debian:bookworm-slim

# The run-time image without its binary: a glibc base, a non-root user,
# the data directory, and nothing that needs a shell (so that a base
# without one, such as distroless/cc, works).
FROM ${BASE} AS runtime
ARG VERSION=dev
ARG COMMIT=
ARG BUILD_DATE=
LABEL org.opencontainers.image.title="gpumeter" \
      org.opencontainers.image.description="GPU metering, waste and queue agent for Docker hosts" \
      org.opencontainers.image.source="https://github.com/gpumeter/gpumeter" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.created="${BUILD_DATE}"
# NVML and nvidia-smi's libraries only: the agent runs no CUDA.
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility \
    GPUMETER_DATA_DIR=/var/lib/gpumeter
# uid and gid 65532, no name needed. The Docker socket's group differs
# from host to host, so it is added at run time: --group-add, or
# group_add in compose, with the socket's gid.
USER 65532:65532
WORKDIR /var/lib/gpumeter
EXPOSE 9400
ENTRYPOINT ["/usr/local/bin/gpumeter"]
CMD ["serve"]

# The run-time image with a binary from the build context, named by
# BINARY (--build-arg BINARY=gpumeter for ./gpumeter), built elsewhere with
# the same stamping:
#   go build -ldflags "-X main.version=... -X main.commit=... -X main.buildDate=..."
# This stage comes before the builder's, so that the classic builder,
# which builds every stage up to its target, never needs BUILDER here. It
# also builds this stage for the default image, where no binary is in the
# context: BINARY's default, this file, is there only so that that COPY
# does not fail. An image of this target built without BINARY fails to
# start ("exec format error"). It has the CA certificates BASE has, if any
# (webhooks over https need them).
FROM runtime AS prebuilt
ARG BINARY=Dockerfile
COPY --chown=0:0 ${BINARY} /usr/local/bin/gpumeter

FROM ${BUILDER} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=
ARG BUILD_DATE=
# The flag quiets the deprecation warnings of NVIDIA's header (README).
RUN CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" \
    go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT} -X main.buildDate=${BUILD_DATE}" \
      -o /out/gpumeter ./cmd/gpumeter

# The default target: the run-time image with the binary built above, and
# the builder's CA certificates, for webhooks and a PostgreSQL ledger over
# TLS (debian:bookworm-slim has none).
FROM runtime
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build --chown=0:0 /out/gpumeter /usr/local/bin/gpumeter
