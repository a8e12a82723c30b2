# syntax=docker/dockerfile:1
#
# pgbridge container image.
#
#   docker build -t pgbridge:local .
#   docker run --rm -e PGBRIDGE_POSTGRES__DSN=... -e PGBRIDGE_KAFKA__BOOTSTRAP_SERVERS=... pgbridge:local
#
# Two stages: the builder installs the package and its dependencies into a virtualenv at
# /opt/pgbridge; the runtime stage copies only that virtualenv onto a clean Python slim image, so no
# build tooling, source tree or pip cache ships. Every runtime dependency (psycopg[binary],
# confluent-kafka, fastavro) comes as a manylinux wheel; only the builder has a C compiler, for
# pgbridge's own Cython kernels (setup.py), and the runtime stage gets just the built extension.
# No credentials are baked in: configuration comes from PGBRIDGE_* variables or a mounted YAML file
# (PGBRIDGE_CONFIG) at run time; see docs/deployment.md.
#
# Both stages use the same exact base: Python's patch release and the Debian release are pinned (the
# floating python:3.11-slim moved from bookworm to trixie under everyone's feet). Bump the tag
# deliberately, with tini's pinned version below if the Debian release changes.

FROM python:3.11.14-slim-bookworm AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
# gcc and the libc headers build the optional Cython kernels of the row path (setup.py).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/pgbridge

# Only what the build reads; .dockerignore keeps the rest of the checkout out of the context.
COPY pyproject.toml setup.py README.md ./
COPY service/ ./service/
# schemas/ (Avro schema parts) through a one-name glob: BuildKit accepts a glob that matches
# nothing, so a checkout without that folder (git keeps no empty folder) still builds.
COPY schema[s] ./schemas/

# Install the project from the local source tree with the versions CI tested (constraints.txt), then
# prove the CLI module and its dependencies import and that the compiled kernels were built (the
# build of an optional extension only warns when it fails).
RUN --mount=type=bind,source=constraints.txt,target=/tmp/constraints.txt \
    /opt/pgbridge/bin/pip install --no-cache-dir -c /tmp/constraints.txt /src \
    && /opt/pgbridge/bin/python -c "import pgbridge.cli" \
    && /opt/pgbridge/bin/python -c "from pgbridge import native; s = native.status(); assert all(s.values()), s"


FROM python:3.11.14-slim-bookworm AS runtime

ARG PGBRIDGE_UID=10001
ARG PGBRIDGE_GID=10001

LABEL org.opencontainers.image.title="pgbridge" \
      org.opencontainers.image.description="PostgreSQL logical replication (pgoutput) to Kafka as Avro" \
      org.opencontainers.image.licenses="Apache-2.0"

# The spill directory of `docker run` (the VOLUME below). The environment wins over a configuration
# file, so with this image set buffer.spill_dir through this variable, never in the file; the Helm
# chart sets it from spill.mountPath (docs/deployment.md).
ENV PATH="/opt/pgbridge/bin:${PATH}" \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PGBRIDGE_BUFFER__SPILL_DIR=/var/lib/pgbridge/spill

# tini as PID 1: it forwards SIGTERM/SIGINT to pgbridge (which stops cleanly on either) and reaps
# any orphaned child, so the image needs no `docker run --init`. Debian's package, version pinned.
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini=0.19.0-1+b3 \
    && rm -rf /var/lib/apt/lists/*

# A fixed, unprivileged UID/GID so volume ownership and Kubernetes runAsUser/fsGroup are predictable.
RUN groupadd --system --gid "${PGBRIDGE_GID}" pgbridge \
    && useradd --system --uid "${PGBRIDGE_UID}" --gid pgbridge --home-dir /var/lib/pgbridge \
       --no-create-home --shell /usr/sbin/nologin pgbridge \
    && mkdir -p /var/lib/pgbridge/spill \
    && chown -R pgbridge:pgbridge /var/lib/pgbridge

COPY --from=builder /opt/pgbridge /opt/pgbridge

USER ${PGBRIDGE_UID}:${PGBRIDGE_GID}
WORKDIR /var/lib/pgbridge

# Transactions larger than the in-memory buffer spill here; mount a volume (or an emptyDir).
VOLUME ["/var/lib/pgbridge/spill"]

# /metrics, /healthz, /readyz, /streamingz on http.port (default 8080).
EXPOSE 8080

# /healthz: 503 when the pipeline is wedged (health.py). pgbridge.probe loads the settings as
# `pgbridge run` does (PGBRIDGE_CONFIG file < environment), so it asks the port pgbridge listens on
# wherever http.port was set; Python's urllib, no curl; proxies bypassed (service/pgbridge/probe.py).
HEALTHCHECK --interval=15s --timeout=10s --start-period=30s --retries=3 \
    CMD ["python", "-m", "pgbridge.probe", "/healthz"]

# SIGTERM (docker stop, Kubernetes) makes `pgbridge run` stop reading, flush Kafka, confirm the last
# safe LSN and exit 0: give it a grace period longer than the Kafka flush (see docs/deployment.md).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--", "pgbridge"]
CMD ["run"]
