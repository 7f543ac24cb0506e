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

import math
import os
from collections.abc import Iterable
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client import multiprocess as prom_multiprocess

from rehearsal.checks import CHECK_CODE
from rehearsal.parsing import VETO_CODES
from rehearsal.trace import RehearsalResult
from server.telemetry.tallies import (
    CounterTally,
    FlushTallies,
    GaugeTally,
    HistogramTally,
    Tally,
)

PREFIX = "rehearsal_gateway_"

# Request-level latencies: sub-millisecond pass-through up to multi-second rehearsals.
REQUEST_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
)  # fmt: skip
# The gateway's own time: fine around the 1 ms p50 target (docs/metrics.md, "Buckets").
OVERHEAD_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
)  # fmt: skip
# Real tool calls: a local function (tens of ms) up to a slow API or a human (10 minutes).
REAL_CALL_BUCKETS = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip
FIDELITY_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)

# Label values known in advance. Their series are exported at zero from the start, so that a
# rate() over an error that has never happened is 0 rather than an absent series, and every name
# the dashboard and the alert rules query exists on a fresh gateway.
ENGINE_ERROR_KINDS = ("connect", "timeout", "status_5xx", "status_4xx", "protocol", "saturated")
STORE_OPS = (  # the operations of server/store/backends.py
    "ping", "save_trace", "load_trace", "save_pending", "take_pending", "append_memory",
    "recent_memory", "save_grounding", "grounding", "record_trust", "trust_table",
    "save_settled", "limits",
)  # fmt: skip
# ---- background store writes and fair-use limits (issue 14; server/store/writer.py, limits.py)
STORE_WRITE_OPS = ("settle", "feedback", "charge")
STORE_WRITE_OUTCOMES = ("written", "failed", "dropped", "cut")
LIMIT_KINDS = ("rate", "concurrency", "engine_calls", "budget_depth")
OUTCOMES = ("ok", "error")  # imagined or real outcome of one committed call
TRUST_POLICIES = ("trusted", "learning", "ignore_vetoes", "off")
COMMIT_PATHS = (
    "anchor", "anchor_vetoed", "replaced", "valid_fallback", "trust_off", "selected",
    "reflected", "reflect_fallback", "least_bad", "early_exit", "salvaged",
)  # fmt: skip
COMMIT_CHECKS = ("ok", "schema_invalid", "unchecked")
DEGRADED_REASONS = ("deadline", "engine_error", "store_unavailable")
REHEARSED_MODES = ("parallel", "sequential")


_Family = Counter | Histogram


class _InFlight:
    """The in-flight gauge up for a ``with`` block (a class: ~3x cheaper than a generator's).

    It holds no state of its own, so one serves every request."""

    __slots__ = ("gauge",)

    def __init__(self, gauge: Gauge | GaugeTally) -> None:
        self.gauge = gauge

    def __enter__(self) -> None:
        self.gauge.inc()

    def __exit__(self, *exc: object) -> None:
        self.gauge.dec()


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
        self._children: dict[tuple[_Family, tuple[str, ...]], Any] = {}
        # One process: counters and histograms are tallied and flushed on read. Several
        # workers write every update to the shared files, so a scrape sees all of them.
        self._tallies: list[Tally] = []
        self._passthrough_tokens: tuple[Any, ...] | None = None  # every pass-through's three
        if multiprocess_dir is None:
            reg.register(FlushTallies(self._tallies))

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
        self.relayed_requests = Counter(
            PREFIX + "relayed_requests",
            "Requests to vLLM routes the gateway relays, by route template and outcome.",
            ("route", "outcome"),
            registry=reg,
        )
        self.relayed_seconds = Histogram(
            PREFIX + "relayed_request_duration_seconds",
            "A relayed request, first byte in to last byte out.",
            ("route",),
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
        self._rehearsal_families(reg)
        self._reliability_families(reg)
        self._fair_use_families(reg)
        self.in_flight = Gauge(
            PREFIX + "in_flight_requests",
            "Chat requests being served now.",
            registry=reg,
            multiprocess_mode="livesum",
        )
        if multiprocess_dir is None:
            tally = GaugeTally(self.in_flight)
            self._tallies.append(tally)
            self._in_flight = _InFlight(tally)
        else:
            self._in_flight = _InFlight(self.in_flight)
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

    def _reliability_families(self, reg: CollectorRegistry) -> None:
        """Faults seen at the edges: engines taken out of routing, clients gone mid-upload."""
        self.engine_ejections = Counter(
            PREFIX + "engine_ejections",
            "Engines taken out of routing, by cause (calls: failures in a row; probes).",
            ("engine", "cause"),
            registry=reg,
        )
        self.rehearsal_preemptions = Counter(
            PREFIX + "rehearsal_preemptions",
            "Rehearsal-role calls cancelled for real work on their engine (RGW_REHEARSAL_YIELD).",
            ("engine",),
            registry=reg,
        )
        self.client_disconnects = Counter(
            PREFIX + "client_disconnects",
            "Clients that left before their request was read (stage upload) or answered.",
            ("stage",),
            registry=reg,
        )

    def engine_ejected(self, engine: str, cause: str) -> None:
        """An engine was taken out of routing (``calls`` or ``probes``)."""
        self.engine_ejections.labels(engine, cause).inc()

    def rehearsal_preempted(self, engine: str, calls: int) -> None:
        """Real work took its slot on ``engine`` and cancelled ``calls`` imaginations there."""
        self._child(self.rehearsal_preemptions, engine).inc(calls)

    def client_disconnected(self, stage: str) -> None:
        """A client left early: ``upload`` (mid-body) or ``body_timeout`` (body never finished)."""
        self.client_disconnects.labels(stage).inc()

    def _rehearsal_families(self, reg: CollectorRegistry) -> None:
        """The families of rehearsal, feedback and the store (docs/metrics-spec.md)."""
        self.rehearsal_seconds = Histogram(
            PREFIX + "rehearsal_duration_seconds",
            "The rehearsal phase: acting and imagining, before the commit.",
            ("mode",), buckets=REQUEST_BUCKETS, registry=reg,
        )  # fmt: skip
        self.imagined_seconds = Histogram(
            PREFIX + "imagined_observation_seconds",
            "One rehearsal-role engine call: one imagined tool result.",
            buckets=REQUEST_BUCKETS, registry=reg,
        )  # fmt: skip
        self.real_call_seconds = Histogram(
            PREFIX + "real_tool_call_seconds",
            "Our response with a committed tool call until the client's real result arrives.",
            buckets=REAL_CALL_BUCKETS, registry=reg,
        )  # fmt: skip
        self.commit_seconds = Histogram(
            PREFIX + "commit_duration_seconds",
            "The commit phase (a reflect call, or select without one).",
            ("commit",), buckets=REQUEST_BUCKETS, registry=reg,
        )  # fmt: skip
        self.overhead_seconds = Histogram(
            PREFIX + "overhead_seconds",
            "Gateway time not spent waiting on engines or the store.",
            ("mode",), buckets=OVERHEAD_BUCKETS, registry=reg,
        )  # fmt: skip
        self.fidelity = Histogram(
            PREFIX + "fidelity",
            "Similarity in [0, 1] between the imagined and the real tool result.",
            ("outcome",), buckets=FIDELITY_BUCKETS, registry=reg,
        )  # fmt: skip
        self.vetoes = Counter(
            PREFIX + "vetoes",
            "Vetoes by code and source (imagined by the simulator, or a deterministic check).",
            ("code", "source"), registry=reg,
        )  # fmt: skip
        self.outcome_predictions = Counter(
            PREFIX + "outcome_predictions",
            "Committed calls with a real result: imagined outcome x real outcome (ok | error).",
            ("imagined", "real"), registry=reg,
        )  # fmt: skip
        self.trust_decisions = Counter(
            PREFIX + "trust_decisions",
            "Candidate tools of rehearsed requests by the trust policy their imagination had.",
            ("policy",), registry=reg,
        )  # fmt: skip
        self.commits = Counter(
            PREFIX + "commits",
            "Rehearsed commits by decision path and the committed call's schema check.",
            ("path", "check"), registry=reg,
        )  # fmt: skip
        self.early_exits = Counter(
            PREFIX + "early_exits", "Rehearsals that ended early.", ("mode",), registry=reg
        )
        self.degraded = Counter(
            PREFIX + "degraded", "Degraded answers by reason.", ("reason",), registry=reg
        )
        self.tokens = Counter(
            PREFIX + "tokens", "Tokens by role and kind.", ("role", "kind"), registry=reg
        )
        self.store_errors = Counter(
            PREFIX + "store_errors", "Store (Redis) failures by operation.", ("op",), registry=reg
        )

    def _fair_use_families(self, reg: CollectorRegistry) -> None:
        """Background store writes and fair-use limits (issue 14; docs/limits.md)."""
        self.store_writes = Counter(
            PREFIX + "store_writes",
            "Background store writes by kind and outcome (written, failed, dropped, cut).",
            ("op", "outcome"),
            registry=reg,
        )
        self.rate_limited = Counter(
            PREFIX + "rate_limited",
            "Requests refused (429) by a per-key limit, by limit.",
            ("limit",),
            registry=reg,
        )
        self.limits_failed_open = Counter(
            PREFIX + "limits_failed_open",
            "Limit checks skipped because the store was unavailable (the request was let through).",
            registry=reg,
        )

    def start_series(self, engines: Iterable[str]) -> None:
        """Export the series of every label value known in advance, at zero."""
        for engine in engines:
            for kind in ENGINE_ERROR_KINDS:
                self.engine_errors.labels(engine, kind)
            self.rehearsal_preemptions.labels(engine)
        for op in STORE_OPS:
            self.store_errors.labels(op)
        for reason in DEGRADED_REASONS:
            self.degraded.labels(reason)
        for code in VETO_CODES:
            self.vetoes.labels(code, "imagined")
        self.vetoes.labels(CHECK_CODE, "check")
        for imagined in OUTCOMES:
            for real in OUTCOMES:
                self.outcome_predictions.labels(imagined, real)
        for policy in TRUST_POLICIES:
            self.trust_decisions.labels(policy)
        for path in COMMIT_PATHS:
            for check in COMMIT_CHECKS:
                self.commits.labels(path, check)
        for mode in REHEARSED_MODES:
            self.early_exits.labels(mode)
        for op in STORE_WRITE_OPS:
            for outcome in STORE_WRITE_OUTCOMES:
                self.store_writes.labels(op, outcome)
        for limit in LIMIT_KINDS:
            self.rate_limited.labels(limit)

    # ---- requests

    def track_in_flight(self) -> _InFlight:
        """Count a request as in flight for the duration of the ``with`` block."""
        return self._in_flight

    def _child(self, family: _Family, *values: str) -> Any:
        """``family.labels(*values)``, looked up once per label set.

        prometheus_client's ``labels()`` checks its arguments, converts and joins them and
        takes the family's lock on every call: seven calls were ~4% of a pass-through
        request's CPU, a dict hit is a tenth of one. Counters and histograms only: their
        series are never removed (the engine gauges are, ``forget_engine``). In one process
        the series comes wrapped in its tally (``server/telemetry/tallies.py``).
        """
        key = (family, values)
        child = self._children.get(key)
        if child is None:
            child = family.labels(*values)
            if self.multiprocess_dir is None:
                tally = HistogramTally if isinstance(family, Histogram) else CounterTally
                child = tally(child)
                self._tallies.append(child)
            self._children[key] = child
        return child

    def observe_request(self, mode: str, outcome: str, seconds: float) -> None:
        """One finished chat request."""
        self._child(self.requests, mode, outcome).inc()
        self._child(self.request_seconds, mode).observe(seconds)

    def observe_relayed(self, route: str, outcome: str, seconds: float) -> None:
        """One finished request to a relayed vLLM route (``route`` is its path template)."""
        self._child(self.relayed_requests, route, outcome).inc()
        self._child(self.relayed_seconds, route).observe(seconds)

    # ---- engines

    def observe_engine_call(self, engine: str, role: str, seconds: float) -> None:
        """One engine call that returned an answer (whatever its status)."""
        self._child(self.engine_call_seconds, engine, role).observe(seconds)

    def engine_error(self, engine: str, kind: str) -> None:
        """One failed engine call."""
        self._child(self.engine_errors, engine, kind).inc()

    def engine_state(self, engine: str, *, healthy: bool, queue_depth: float) -> None:
        """The outcome of one health check."""
        self.engine_healthy.labels(engine).set(1.0 if healthy else 0.0)
        self.engine_queue_depth.labels(engine).set(queue_depth)

    def forget_engine(self, engine: str) -> None:
        """An engine left the pool (discovery): its gauges must not read as a down engine.

        One process drops the series. Multiprocess mode cannot drop a series from the shared
        files, so it writes NaN, which no comparison in an alert or recording rule matches.
        """
        for gauge in (self.engine_healthy, self.engine_queue_depth):
            if self.multiprocess_dir is None:
                gauge.remove(engine)
            else:
                gauge.labels(engine).set(math.nan)

    # ---- rehearsal

    def observe_imagined(self, seconds: float) -> None:
        """One rehearsal-role call: one imagined tool result."""
        self.imagined_seconds.observe(seconds)

    def observe_real_tool_call(self, seconds: float) -> None:
        """Our response with a committed call → the client's real result arriving."""
        self.real_call_seconds.observe(seconds)

    def observe_fidelity(self, score: float, outcome: str) -> None:
        """How close the imagined result was to the real one; ``outcome`` is what was imagined."""
        self._child(self.fidelity, outcome.split(":", 1)[0]).observe(score)

    def observe_outcome_prediction(self, imagined_error: bool, real_error: bool) -> None:
        """Did imagination predict the real outcome (error vs success) of a committed call?"""
        imagined, real = ("error" if imagined_error else "ok"), ("error" if real_error else "ok")
        self._child(self.outcome_predictions, imagined, real).inc()

    def store_error(self, op: str) -> None:
        self._child(self.store_errors, op).inc()

    def store_write(self, op: str, outcome: str) -> None:
        self._child(self.store_writes, op, outcome).inc()

    def limited(self, limit: str) -> None:
        self._child(self.rate_limited, limit).inc()

    def limit_failed_open(self) -> None:
        self.limits_failed_open.inc()

    def observe_overhead(self, mode: str, seconds: float) -> None:
        self._child(self.overhead_seconds, mode).observe(max(seconds, 0.0))

    def observe_rehearsal(self, result: RehearsalResult, degraded: str | None) -> None:
        """Everything one finished rehearsal says: phases, vetoes, early exit, tokens, faults."""
        mode = result.budget.mode
        timings = result.timings
        self._child(self.rehearsal_seconds, mode).observe((timings.act + timings.rehearse) / 1000.0)
        if timings.commit or result.budget.commit == "select":
            self._child(self.commit_seconds, result.budget.commit).observe(timings.commit / 1000.0)
        for trajectory in result.trajectories:
            for step in trajectory.steps:
                for observation in step.observations:
                    if observation.verdict == "veto":
                        code = observation.code or "UNKNOWN"
                        self._child(self.vetoes, code, observation.source).inc()
        for policy in result.trust.values():
            self._child(self.trust_decisions, policy).inc()
        self._child(self.commits, result.commit_path, result.commit_check).inc()
        if result.early_exit is not None:
            self._child(self.early_exits, mode).inc()
        if degraded is not None:
            self._child(self.degraded, degraded).inc()
        for role, usage in result.tokens.items():
            self._child(self.tokens, role, "prompt").inc(usage.prompt)
            self._child(self.tokens, role, "completion").inc(usage.completion)
            self._child(self.tokens, role, "cached").inc(usage.cached)

    def observe_passthrough_usage(self, prompt: int, completion: int, cached: int) -> None:
        series = self._passthrough_tokens
        if series is None:
            series = self._passthrough_tokens = tuple(
                self._child(self.tokens, "passthrough", kind)
                for kind in ("prompt", "completion", "cached")
            )
        series[0].inc(prompt)
        series[1].inc(completion)
        series[2].inc(cached)

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
