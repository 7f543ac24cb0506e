"""All Prometheus metrics of the gateway, named as docs/metrics-spec.md pins them.

``GatewayMetrics`` owns one ``CollectorRegistry`` per app (no module-level metric objects, so two
apps in one process never share counters). Each family is an attribute created in
``__init__``; new families of the spec are added there the same way, with a small method
that records them, so callers never touch label plumbing.

Multiprocess mode (several uvicorn workers): ``prometheus_client`` picks its value storage from
``PROMETHEUS_MULTIPROC_DIR`` when it is first imported, so the launcher sets that variable before
the workers start and passes the same directory here; ``render`` then merges every worker's files,
and each gauge declares how workers combine (``multiprocess_mode``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client import multiprocess as prom_multiprocess

PREFIX = "rehearsal_gateway_"

# Request-level latencies: sub-millisecond pass-through up to multi-second rehearsals.
REQUEST_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
)  # fmt: skip


class GatewayMetrics:
    """The gateway's metric families and the few operations that record them."""

    def __init__(self, multiprocess_dir: str | None = None) -> None:
        self.multiprocess_dir = multiprocess_dir
        if multiprocess_dir is not None and os.environ.get("PROMETHEUS_MULTIPROC_DIR") != (
            multiprocess_dir
        ):
            raise RuntimeError(
                "multiprocess metrics need PROMETHEUS_MULTIPROC_DIR set to the same directory "
                "before prometheus_client is imported (the `serve` command does this)"
            )
        # In multiprocess mode values live in files; the registry only collects for one worker.
        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry

        self.requests = Counter(
            PREFIX + "requests",
            "Chat requests by rehearsal mode and outcome.",
            ("mode", "outcome"),
            registry=reg,
        )
        self.request_seconds = Histogram(
            PREFIX + "request_duration_seconds",
            "Whole request, first byte in to last byte out.",
            ("mode",),
            buckets=REQUEST_BUCKETS,
            registry=reg,
        )
        self.engine_call_seconds = Histogram(
            PREFIX + "engine_call_seconds",
            "One engine call by role, until its last byte.",
            ("engine", "role"),
            buckets=REQUEST_BUCKETS,
            registry=reg,
        )
        self.engine_errors = Counter(
            PREFIX + "engine_errors",
            "Engine failures by kind (connect, timeout, status_5xx, status_4xx, protocol).",
            ("engine", "kind"),
            registry=reg,
        )
        self.in_flight = Gauge(
            PREFIX + "in_flight_requests",
            "Chat requests being served now.",
            registry=reg,
            multiprocess_mode="livesum",
        )
        self.engine_healthy = Gauge(
            PREFIX + "engine_healthy",
            "1 when the engine's last health check passed.",
            ("engine",),
            registry=reg,
            multiprocess_mode="livemostrecent",
        )
        self.engine_queue_depth = Gauge(
            PREFIX + "engine_queue_depth",
            "The engine's vllm:num_requests_waiting as last seen.",
            ("engine",),
            registry=reg,
            multiprocess_mode="livemostrecent",
        )

    # ---- requests

    @contextmanager
    def track_in_flight(self) -> Iterator[None]:
        """Count a request as in flight for the duration of the block."""
        self.in_flight.inc()
        try:
            yield
        finally:
            self.in_flight.dec()

    def observe_request(self, mode: str, outcome: str, seconds: float) -> None:
        """One finished chat request."""
        self.requests.labels(mode, outcome).inc()
        self.request_seconds.labels(mode).observe(seconds)

    # ---- engines

    def observe_engine_call(self, engine: str, role: str, seconds: float) -> None:
        """One engine call that returned an answer (whatever its status)."""
        self.engine_call_seconds.labels(engine, role).observe(seconds)

    def engine_error(self, engine: str, kind: str) -> None:
        """One failed engine call."""
        self.engine_errors.labels(engine, kind).inc()

    def engine_state(self, engine: str, *, healthy: bool, queue_depth: float) -> None:
        """The outcome of one health check."""
        self.engine_healthy.labels(engine).set(1.0 if healthy else 0.0)
        self.engine_queue_depth.labels(engine).set(queue_depth)

    # ---- exposition

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type, merged across workers when multiprocess."""
        if self.multiprocess_dir is None:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        merged = CollectorRegistry()
        # prometheus_client's multiprocess helpers carry no annotations.
        prom_multiprocess.MultiProcessCollector(merged, path=self.multiprocess_dir)  # type: ignore[no-untyped-call]
        return generate_latest(merged), CONTENT_TYPE_LATEST

    def worker_exited(self, pid: int) -> None:
        """Drop a finished worker's live gauges (multiprocess mode only)."""
        if self.multiprocess_dir is not None:
            prom_multiprocess.mark_process_dead(pid, self.multiprocess_dir)  # type: ignore[no-untyped-call]
