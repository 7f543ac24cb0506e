"""Readiness: the dependency checks ``/ready`` runs, and how their verdicts add up.

Each layer that owns a dependency offers its check (``EnginesReady`` beside the pool,
``StoreReady`` beside the store); the lifespan lists them and the route runs ``readiness``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Protocol

log = logging.getLogger("rehearsal_gateway.server")


@dataclass(frozen=True, slots=True)
class CheckResult:
    ok: bool
    detail: str


class ReadinessCheck(Protocol):
    """One dependency ``/ready`` reports: the engines, and (not critical) the store."""

    @property
    def name(self) -> str: ...

    async def check(self) -> CheckResult: ...


async def readiness(checks: list[ReadinessCheck]) -> tuple[bool, dict[str, Any]]:
    """Run every check; the overall verdict and a JSON-able report.

    A check may declare ``critical = False`` (the store): when it fails, the gateway still serves
    (rehearsal without memory), so it stays ready and reports itself ``degraded``.
    """
    report: dict[str, Any] = {}
    ready, degraded = True, False
    for item in checks:
        result = await item.check()
        if not result.ok:
            if getattr(item, "critical", True):
                ready = False
            else:
                degraded = True
        report[item.name] = {"ok": result.ok, "detail": result.detail}
    status = "not_ready" if not ready else "degraded" if degraded else "ready"
    return ready, {"status": status, "checks": report}


@dataclass
class Draining:
    """Not ready once a shutdown signal arrived, so that a load balancer moves away at once.

    ``on_signals`` chains a handler in front of the server's own (uvicorn's, which then stops
    accepting and lets in-flight requests finish within ``RGW_SHUTDOWN_GRACE_S``): the flag is
    set before the server starts shutting down. Signals are the main thread's only; an app served
    in another thread (the tests' in-process gateways) is drained by its server alone.
    """

    name: str = "shutdown"
    active: bool = False
    _previous: dict[int, Any] = field(default_factory=dict)

    async def check(self) -> CheckResult:
        return CheckResult(not self.active, "draining" if self.active else "serving")

    def begin(self) -> None:
        if not self.active:
            log.info("shutdown signal: /ready answers 503, in-flight requests finish")
        self.active = True

    def _handle(self, sig: int, frame: FrameType | None) -> None:
        self.begin()
        previous = self._previous.get(sig)
        if callable(previous):
            previous(sig, frame)

    @contextlib.contextmanager
    def on_signals(self) -> Iterator[None]:
        """Mark draining on SIGTERM/SIGINT while the block runs (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._handle)
        try:
            yield
        finally:
            for number, handler in self._previous.items():
                signal.signal(number, handler)
            self._previous.clear()


async def warn_while_failing(
    check: ReadinessCheck, first: CheckResult, what: str, interval_s: float
) -> None:
    """Warn that a dependency cannot be reached, naming it and why, for as long as that lasts.

    ``first`` is the check's verdict at start-up (warned about at once when it failed); then the
    check runs every ``interval_s`` seconds, warning on each failure and saying when it answers
    again. A lifespan task, cancelled at shutdown.
    """
    result = first
    while True:
        if not result.ok:
            log.warning("%s is unreachable: %s", what, result.detail, extra={"check": check.name})
        await asyncio.sleep(interval_s)
        ok_before = result.ok
        result = await check.check()
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            # A client library that swallowed the cancellation must not keep shutdown waiting.
            raise asyncio.CancelledError
        if result.ok and not ok_before:
            log.info("%s answers again", what, extra={"check": check.name})
