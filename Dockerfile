# The gateway image: the project and its runtime dependencies on a slim Python, run as a non-root
# user. Torch never enters it (the `gpu` extra is not installed); engines run in their own images.
#
#   docker build -t rehearsal-gateway .
#   docker run -p 8000:8000 -e RGW_ENGINES=http://vllm:8000/v1 rehearsal-gateway
#
# Every setting is an RGW_* variable (docs/configuration.md); flags after the image name work too.
# The same image runs the engine twin: `docker run --entrypoint rehearsal-gateway IMAGE twin ...`.

# Pinned to a patch release and a Debian release, so that a rebuild does not silently move to
# another Python or another libc; both stages use it (the virtualenv points at its interpreter).
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
# The virtualenv gets no pip, setuptools or wheel of its own: the base image's pip installs into
# it (`--python`), and the build back-end lives in pip's throw-away isolated build environment.
# So the runtime stage copies the project and its runtime dependencies, and nothing that builds.
RUN python -m venv --without-pip /opt/venv
WORKDIR /src
# Dependencies first, from pyproject alone with empty packages, so that editing the source does
# not invalidate the (slow) dependency layer.
COPY pyproject.toml README.md ./
RUN mkdir -p rehearsal_gateway && touch rehearsal_gateway/__init__.py \
    && pip --python /opt/venv/bin/python install . \
    && pip --python /opt/venv/bin/python uninstall --yes rehearsal-gateway
COPY server ./server
COPY rehearsal ./rehearsal
COPY clients ./clients
COPY twin ./twin
# The one installed package: an __init__ and links to the four folders above.
COPY rehearsal_gateway ./rehearsal_gateway
RUN pip --python /opt/venv/bin/python install --no-deps . \
    && /opt/venv/bin/python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)"

FROM ${PYTHON_IMAGE} AS runtime
# OCI metadata; the version is pyproject's (tests/deploy/test_assets.py keeps them equal).
LABEL org.opencontainers.image.title="rehearsal-gateway" \
      org.opencontainers.image.description="OpenAI-compatible gateway that lets EnvACE agent models rehearse tool calls before committing one" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"
# Listen on every interface through the environment, not through CMD: arguments given to
# `docker run IMAGE --engine ...` replace CMD, and the gateway must still be reachable.
# With RGW_WORKERS > 1 and no RGW_METRICS_DIR, the gateway makes its Prometheus multiprocess
# directory under /tmp, which stays writable for the unprivileged user.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    RGW_HOST=0.0.0.0 \
    RGW_PORT=8000
RUN groupadd --system --gid 10001 gateway \
    && useradd --system --no-log-init --uid 10001 --gid gateway \
        --home-dir /home/gateway --create-home gateway
COPY --from=build /opt/venv /opt/venv
USER 10001:10001
WORKDIR /home/gateway
EXPOSE 8000
# The slim base has no curl; Python's urllib is enough. /health is liveness only (no engine
# call, no API key). It follows RGW_PORT; a port given as a flag needs its own health check.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('RGW_PORT', '8000'), timeout=2)"]
# uvicorn drains open requests for up to 10 s on SIGTERM (server/launcher/serve.py), then exits; give
# `docker stop` more than that (compose: stop_grace_period).
STOPSIGNAL SIGTERM
ENTRYPOINT ["rehearsal-gateway", "serve"]
