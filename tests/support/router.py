"""Start the real ``vllm-router`` (the pinned PyPI binary) in front of engines on loopback.

The flags are the ones ``docs/deploy.md`` and the deploy files give it: ``consistent_hash`` so a
session's calls stay on one engine, and a circuit breaker that opens on the first failure so the
retry of a call cut by a dying engine goes to a live one instead of the same dead one.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from tests.support.procs import Proc, free_port, start_http_server

ROUTER_BIN = Path(sys.executable).parent / "vllm-router"

# What a deployment sets too (deploy/compose.router.yaml, the k8s router overlay).
ROUTER_FLAGS = (
    "--policy",
    "consistent_hash",
    "--cb-failure-threshold",
    "1",
    "--retry-initial-backoff-ms",
    "10",
)


def start_router(
    workers: Sequence[str], log_path: Path, *, health_interval_s: int = 1, extra: Sequence[str] = ()
) -> Proc:
    """``vllm-router`` on a free port; returns once ``/readiness`` says it can serve."""
    if not ROUTER_BIN.exists():
        raise RuntimeError(f"{ROUTER_BIN} is missing: `make install` installs vllm-router")
    port = free_port()
    argv = [
        str(ROUTER_BIN),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        # Its Prometheus listener defaults to port 29000 for every router: one each here.
        "--prometheus-port",
        str(free_port()),
        "--log-level",
        "warning",
        "--health-check-interval-secs",
        str(health_interval_s),
        *ROUTER_FLAGS,
        *extra,
        "--worker-urls",
        *workers,
    ]
    return start_http_server(argv, port=port, log_path=log_path, ready_path="/readiness")
