"""The engine pool's health: passive ejection, active probes, canaries, and the readiness check.

``PoolHealth`` is the half of ``EnginePool`` (``server/engines/pool.py``, whose docstring says
how health is judged) that records failed calls, probe and canary outcomes and runs the probe
loop; the pool inherits it, so callers see one object. ``EnginesReady`` is the readiness check
the lifespan registers: ready when at least one engine of real work passed its last probe.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from ..telemetry.metrics import GatewayMetrics
from ..telemetry.readiness import CheckResult
from .engine import Engine, Probe

log = logging.getLogger("rehearsal_gateway.engines")
# While an engine stays out, the warning that names it and why comes again this often.
DOWN_REMINDER_S = 60.0


class PoolHealth:
    """Health state changes of the pool's engines (a base of ``EnginePool``: its fields)."""

    engines: list[Engine]
    metrics: GatewayMetrics
    eject_after: int
    health_failures: int
    _room: asyncio.Condition
    _waiting: int

    def mark_unreachable(self, engine: Engine) -> None:
        """Take an engine out of routing until a probe passes."""
        if engine.healthy:
            log.warning("engine %s taken out; routing around it", engine.name)
        engine.healthy = False
        self.metrics.engine_state(engine.name, healthy=False, queue_depth=engine.queue_depth)

    def record_failure(self, engine: Engine) -> None:
        """Passive health: one failed call; ``eject_after`` in a row take the engine out."""
        engine.failures += 1
        if engine.failures >= self.eject_after and engine.healthy:
            log.warning("engine %s failed %d calls in a row", engine.name, engine.failures)
            self.metrics.engine_ejected(engine.name, "calls")
            self.mark_unreachable(engine)

    def apply(self, engine: Engine, probe: Probe, since: float | None = None) -> None:
        """Record one health check's outcome (ignored for an engine that left meanwhile).

        ``since``: when the previous probe round started; a timed-out probe is excused when the
        engine delivered real traffic after it (busy, not dead).
        """
        if engine not in self.engines:
            return
        engine.probe_passed = probe.healthy
        if probe.generated is not None:
            if probe.generated > engine.generated >= 0:
                engine.progress_at = time.monotonic()  # generating: alive, if slow to answer
            engine.generated = probe.generated
        if probe.healthy:
            engine.probe_failures = 0
            engine.hung = False
        elif probe.timed_out and since is not None and engine.progress_at > since:
            return  # slow to probe, but answering: keep its state and last queue depth
        else:
            engine.probe_failures += 1
            if engine.probe_failures < self.health_failures and engine.healthy:
                return
        healthy = probe.healthy and not engine.stalled  # a stalled one waits for a canary
        if healthy:
            if not engine.healthy:
                log.info("engine %s is healthy", engine.name)
            engine.down_reason = ""
        else:
            self._warn_down(
                engine, probe.reason if not probe.healthy else "stalled: a canary went unanswered"
            )
        if engine.healthy and not healthy:
            self.metrics.engine_ejected(engine.name, "probes")
            if probe.timed_out:
                engine.hung = True
                aborted = engine.abort_calls()
                if aborted:
                    log.warning("engine %s stopped answering; %d calls moved", engine.name, aborted)
        engine.healthy = healthy
        engine.queue_depth = probe.queue_depth
        if probe.models and not engine.spec.model:
            engine.models = probe.models
        if probe.cards:
            engine.cards = probe.cards
        self.metrics.engine_state(engine.name, healthy=healthy, queue_depth=probe.queue_depth)

    async def eject_stalled(self, engine: Engine) -> None:
        """Take out an engine whose waiting calls and canary went unanswered; move its calls.

        It stays out, whatever its probes say, until a canary is answered (``canary_answered``).
        The calls waiting on it are aborted now: each moves to another engine while nothing
        was sent to its client, or is answered 504.
        """
        if engine not in self.engines or engine.stalled:
            return
        engine.stalled = True
        if engine.healthy:
            self.metrics.engine_ejected(engine.name, "canary")
        self.mark_unreachable(engine)
        aborted = engine.abort_calls()
        log.warning(
            "engine %s answered neither its waiting calls nor a canary; %d calls moved",
            engine.name,
            aborted,
        )
        if self._waiting:
            await self._notify_all()  # callers queued for a slot choose again, without it

    async def canary_answered(self, engine: Engine) -> None:
        """The engine answered a canary: alive; a stalled one is back once its probes pass."""
        engine.progress_at = time.monotonic()
        if not engine.stalled:
            return
        engine.stalled = False
        if engine not in self.engines or not engine.probe_passed:
            return  # the next passing probe brings it back
        log.info("engine %s answered a canary; healthy", engine.name)
        engine.healthy = True
        self.metrics.engine_state(engine.name, healthy=True, queue_depth=engine.queue_depth)
        if self._waiting:
            await self._notify_all()

    def _warn_down(self, engine: Engine, reason: str) -> None:
        """Warn that an engine is out, naming its URL and why: when it goes (or starts) out,
        and again every ``DOWN_REMINDER_S`` while it stays out."""
        now = time.monotonic()
        changed = engine.healthy or reason != engine.down_reason or not engine.down_logged_at
        if not changed and now - engine.down_logged_at < DOWN_REMINDER_S:
            return
        engine.down_reason, engine.down_logged_at = reason, now
        log.warning(
            "engine %s (%s) is unreachable: %s; routing around it until a probe passes",
            engine.name, engine.base_url, reason or "unhealthy", extra={"engine": engine.name},
        )  # fmt: skip

    async def check_all(self, probe: Callable[[Engine], Awaitable[Probe]]) -> None:
        """Probe every engine once, concurrently."""
        await self.check(list(self.engines), probe)

    async def check(
        self, engines: Sequence[Engine], probe: Callable[[Engine], Awaitable[Probe]]
    ) -> None:
        """Probe these engines once, concurrently, and wake callers waiting for room."""
        started = time.monotonic()
        results = await asyncio.gather(*(probe(engine) for engine in engines))
        for engine, result in zip(engines, results, strict=True):
            since, engine.probed_at = engine.probed_at, started
            self.apply(engine, result, since or None)
        if self._waiting:
            await self._notify_all()

    async def _notify_all(self) -> None:
        async with self._room:
            self._room.notify_all()

    async def run_health_checks(
        self, probe: Callable[[Engine], Awaitable[Probe]], interval: float
    ) -> None:
        """Probe forever, every ``interval`` seconds (a lifespan task, cancelled at shutdown)."""
        while True:
            await asyncio.sleep(interval)
            await self.check_all(probe)

    @property
    def any_healthy(self) -> bool:
        return any(engine.healthy for engine in self.engines)


@dataclass(frozen=True)
class EnginesReady:
    """Ready when at least one engine of real work (one that serves acting calls) passed its
    last health check: engines that only imagine cannot answer a request."""

    pool: PoolHealth
    name: str = "engines"

    async def check(self) -> CheckResult:
        healthy = [e for e in self.pool.engines if e.healthy]
        total = len(self.pool.engines)
        acting = any("act" in e.roles for e in healthy)
        return CheckResult(acting, f"{len(healthy)}/{total} healthy")
