# The gateway image: the project and its runtime dependencies on a slim Python, run as a non-root
# user. Torch never enters it (the `gpu` extra is not installed); engines run in their own images.
#
#   docker build -t rehearsal-gateway .
#   docker run -p 8000:8000 rehearsal-gateway --engine http://vllm:8000/v1
#
# The same image runs the engine twin: `docker run --entrypoint rehearsal-gateway IMAGE twin ...`.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# Dependencies first, from pyproject alone with empty packages, so that editing the source does
# not invalidate the (slow) dependency layer.
COPY pyproject.toml README.md ./
RUN for pkg in server rehearsal clients twin; do mkdir -p "$pkg" && touch "$pkg/__init__.py"; done \
    && pip install . \
    && pip uninstall -y rehearsal-gateway
COPY server ./server
COPY rehearsal ./rehearsal
COPY clients ./clients
COPY twin ./twin
RUN pip install --no-deps . \
    && python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)"

FROM ${PYTHON_IMAGE} AS runtime
# Listen on every interface through the environment, not through CMD: arguments given to
# `docker run IMAGE --engine ...` replace CMD, and the gateway must still be reachable.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    RGW_HOST=0.0.0.0 \
    RGW_PORT=8000
RUN groupadd --system --gid 10001 gateway \
    && useradd --system --uid 10001 --gid gateway --home-dir /home/gateway --create-home gateway
COPY --from=build /opt/venv /opt/venv
USER 10001:10001
WORKDIR /home/gateway
EXPOSE 8000
# The slim base has no curl; Python's urllib is enough. /health is liveness only (no engine call).
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2)"]
ENTRYPOINT ["rehearsal-gateway", "serve"]
