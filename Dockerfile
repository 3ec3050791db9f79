# syntax=docker/dockerfile:1
#
# scalebot's container image.
#
#   docker build -t scalebot:0.1.0 .
#   docker run --rm scalebot:0.1.0 --help
#
# Two stages on the same pinned base: `build` turns the project into wheels and installs them
# into a virtual environment; the final stage copies only that environment, so no compiler, no
# pip and no source tree ships. The base is pinned to an exact Python patch release and Debian
# release; pin it further by digest in your registry (python:3.11.14-slim-bookworm@sha256:...)
# when you mirror it.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY pyproject.toml README.md ./
COPY engine ./engine
COPY bot ./bot
COPY localcluster ./localcluster
# Every dependency of scalebot has a binary wheel for CPython 3.11 on Linux, so building needs no
# compiler. The environment is created without pip (--without-pip) and filled by the build stage's
# pip (--python), from the wheels just built and nothing else (--no-index).
RUN python -m pip wheel --wheel-dir /wheels . \
 && python -m venv --without-pip /opt/scalebot \
 && python -m pip --python /opt/scalebot/bin/python install --no-index --find-links /wheels scalebot

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="scalebot" \
      org.opencontainers.image.description="Slack ChatOps for Kubernetes node pools: drain, scale to zero, wake" \
      org.opencontainers.image.licenses="Apache-2.0"
# The base image's packaging tools are not needed to run scalebot; fewer tools, less to exploit.
RUN python -m pip uninstall --yes --disable-pip-version-check pip setuptools wheel \
 && groupadd --system --gid 10001 scalebot \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin scalebot
COPY --from=build /opt/scalebot /opt/scalebot
# The root filesystem is read-only in manifests/: no bytecode writes (the wheels were compiled at
# install time), HOME on the /tmp emptyDir for any library that wants a cache directory.
ENV PATH=/opt/scalebot/bin:$PATH \
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
