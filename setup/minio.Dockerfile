# syntax=docker/dockerfile:1
#
# MinIO for docker compose, built from source at the same module version as the local service
# (setup/versions.env MINIO_VERSION; scripts/setup.sh runs the same `go install`). MinIO publishes no
# container image of that version: its community images stopped in 2025 (the last multi-arch one,
# RELEASE.2025-09-07T16-13-09Z, predates the local build by five months). tests/unit/deploy/test_compose.py
# holds the build argument in docker-compose.yml equal to setup/versions.env.

FROM golang:1.26 AS build
ARG MINIO_VERSION
RUN test -n "${MINIO_VERSION}" \
 && CGO_ENABLED=0 GOFLAGS=-trimpath go install "github.com/minio/minio@${MINIO_VERSION}"

FROM debian:bookworm-slim
# curl: the compose healthcheck asks MinIO's readiness endpoint.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /go/bin/minio /usr/local/bin/minio
ENTRYPOINT ["minio"]
