# syntax=docker/dockerfile:1
#
# scalebot's container image, for machines with Docker (BuildKit):
#
#   docker build -t scalebot:0.1.0 .
#   docker run --rm scalebot:0.1.0 --help
#
# scripts/build-image.sh builds the same image without a container engine (and is what the test
# suite builds and runs): the same Debian packages (image/packages.txt), the same Python lock
# (requirements/image.txt), the same setup script (image/setup.sh), and this file's final-stage
# USER, WORKDIR, ENV, EXPOSE, ENTRYPOINT, CMD and LABEL, which that script reads from here.
#
# Both stages are Debian bookworm, whose Python 3.11 the image runs. Pin the base further by digest
# in your registry (debian:bookworm-slim@sha256:...) when you mirror it; the packages on top are
# pinned by version in image/packages.txt.
ARG DEBIAN_IMAGE=debian:bookworm-slim

# Build stage: the scalebot wheel and the locked wheels (sha256-checked). Every dependency has a
# binary wheel for CPython 3.11 on Linux, so no compiler is needed; the build backend comes from
# requirements/build.txt (hashed), not from whatever the index offers that day.
FROM ${DEBIAN_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv \
 && python3.11 -m venv /tools
COPY requirements/build.txt /tools/build.txt
RUN /tools/bin/pip install --require-hashes --no-deps -r /tools/build.txt
WORKDIR /src
COPY pyproject.toml README.md ./
COPY engine ./engine
COPY bot ./bot
COPY localcluster ./localcluster
COPY requirements/image.txt image/setup.sh /wheels/
RUN /tools/bin/pip download --require-hashes --no-deps --only-binary=:all: -r /wheels/image.txt -d /wheels \
 && /tools/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /wheels .

# Final stage: Debian's Python and the pinned packages, then image/setup.sh installs the wheels into
# /opt/scalebot (no pip of its own, no compiler, no source tree) and creates the user and directories.
FROM ${DEBIAN_IMAGE}
LABEL org.opencontainers.image.title="scalebot" \
      org.opencontainers.image.description="Slack ChatOps for Kubernetes node pools: drain, scale to zero, wake" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY image/packages.txt /tmp/packages.txt
RUN apt-get update \
 && apt-get install -y --no-install-recommends $(grep -v '^#' /tmp/packages.txt) \
 && rm -rf /var/lib/apt/lists/* /tmp/packages.txt
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels sh /wheels/setup.sh
# The root filesystem is read-only in manifests/: no bytecode writes (setup.sh compiled it), HOME on
# the /tmp emptyDir for any library that wants a cache directory. PATH is written out in full:
# scripts/build-image.sh starts from an empty environment.
ENV PATH=/opt/scalebot/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    SCALEBOT_DB=/data/scalebot.db \
    SCALEBOT_CONFIG=/etc/scalebot/config.yaml
WORKDIR /data
# Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
# 3000: Slack's Request URL (HTTP mode); 8080: /healthz, /readyz, /metrics.
EXPOSE 3000 8080
ENTRYPOINT ["scalebot"]
CMD ["run"]
