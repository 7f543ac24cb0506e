"""All Prometheus metrics of the gateway, named as docs/metrics-spec.md pins them.

``GatewayMetrics`` owns one ``CollectorRegistry`` per app (no module-level metric objects, so two
apps in one process never share counters). Each family is an attribute declared in
``server/telemetry/families.py``; a new family of the spec is declared there, with a small
method here that records it, so callers never touch label plumbing.

Multiprocess mode (several uvicorn workers): ``prometheus_client`` picks its value storage from
``PROMETHEUS_MULTIPROC_DIR`` when it is first imported, so the launcher sets that variable before
the workers start and passes the same directory here; ``render`` then merges every worker's files,
and each gauge declares how workers combine (``multiprocess_mode``).
"""

from __future__ import annotations

import math
import os
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

from rehearsal_gateway.rehearsal.risk import turn_risk
from rehearsal_gateway.rehearsal.trace import RehearsalResult

from .families import MetricFamilies
from .tallies import (
    CounterTally,
    FlushTallies,
    GaugeTally,
    Tally,
)

_Family = Counter | Histogram


class _InFlight:
    """The in-flight gauge up for a ``with`` block (a slotted class: cheaper than a generator).

    It holds no state of its own, so one serves every request."""

    __slots__ = ("gauge",)

    def __init__(self, gauge: Gauge | GaugeTally) -> None:
        self.gauge = gauge

    def __enter__(self) -> None:
        self.gauge.inc()

    def __exit__(self, *exc: object) -> None:
        self.gauge.dec()


class GatewayMetrics(MetricFamilies):
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
        # One process: counters are tallied and flushed on read. Several
        # workers write every update to the shared files, so a scrape sees all of them.
        self._tallies: list[Tally] = []
        self._passthrough_tokens: tuple[Any, ...] | None = None  # every pass-through's three
        if multiprocess_dir is None:
            reg.register(FlushTallies(self._tallies))
        super().__init__(reg)
        if multiprocess_dir is None:
            tally = GaugeTally(self.in_flight)
            self._tallies.append(tally)
            self._in_flight = _InFlight(tally)
        else:
            self._in_flight = _InFlight(self.in_flight)

    def engine_ejected(self, engine: str, cause: str) -> None:
        """An engine was taken out of routing (``calls``, ``probes`` or ``canary``)."""
        self.engine_ejections.labels(engine, cause).inc()

    def engine_canary(self, engine: str, outcome: str) -> None:
        """A canary to ``engine`` was ``answered`` (or traffic came meanwhile) or ``silent``."""
        self.engine_canaries.labels(engine, outcome).inc()

    def rehearsal_preempted(self, engine: str, calls: int) -> None:
        """Real work took its slot on ``engine`` and cancelled ``calls`` imaginations there."""
        self._child(self.rehearsal_preemptions, engine).inc(calls)

    def client_disconnected(self, stage: str) -> None:
        """A client left early: ``upload`` (mid-body) or ``body_timeout`` (body never finished)."""
        self.client_disconnects.labels(stage).inc()

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
        the series of a counter comes wrapped in its tally (``server/telemetry/tallies.py``).
        """
        key = (family, values)
        child = self._children.get(key)
        if child is None:
            child = family.labels(*values)
            if self.multiprocess_dir is None and not isinstance(family, Histogram):
                child = CounterTally(child)
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

    def observe_real_result(self, risk: str, real_error: bool) -> None:
        """One committed call's real result, by the call's risk class."""
        self._child(self.real_results, risk, "error" if real_error else "ok").inc()

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
                    if observation.source == "imagined":
                        self._child(self.imagination_parse, observation.parse).inc()
                    if observation.verdict == "veto":
                        code = observation.code or "UNKNOWN"
                        self._child(self.vetoes, code, observation.source).inc()
        for policy in result.trust.values():
            self._child(self.trust_decisions, policy).inc()
        if result.auto is not None:
            learned = "probe" if result.auto["probe"] else str(result.auto["budget"])
            self._child(self.auto_budgets, learned).inc()
        risk = turn_risk(result.turn, result.risk) or "none"
        self._child(self.commits, result.commit_path, result.commit_check, risk).inc()
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
