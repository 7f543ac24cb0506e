"""The stall watch: an engine that passes its probes but answers no call is found by a canary.

A non-streamed answer sends no byte until its generation ends, so a call's silence cannot tell an
engine that hangs behind a passing ``/health`` from a long generation. The watch asks the engine
instead: once calls have waited on it for ``after_s`` and nothing came back from it for as long
(no answer, no stream chunk, no rise of its own ``vllm:generation_tokens_total``), it sends the
engine a **canary**, a one-token chat completion bounded by ``timeout_s``. Any answer, or any of
the engine's traffic meanwhile, shows it alive and the calls keep waiting (a long generation is
never cut). Silence takes the engine out as *stalled*: the calls waiting on it are aborted
(``Engine.abort_calls``), so each moves to another engine while nothing was sent to its client,
or is answered 504; and the engine stays out, whatever its ``/health`` says, until a canary is
answered again (one every ``retry_s`` while its probes pass).

A canary takes no slot of the engine's and at most one is in flight per engine. Router entries
are not watched: a canary through a router tests whichever engine it picks.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from .engine import Engine
from .pool import EnginePool

Canary = Callable[[Engine], Awaitable[bool]]


@dataclass(eq=False)
class StallWatch:
    """Canaries for engines whose calls wait in silence; ejection of those that stay silent."""

    pool: EnginePool
    canary: Canary  # True when the engine answered (``EngineClient.canary``)
    after_s: float = 10.0
    timeout_s: float = 10.0
    retry_s: float = 5.0  # between two canaries to a stalled engine whose probes pass
    _checks: dict[Engine, asyncio.Task[None]] = field(default_factory=dict)

    @property
    def in_flight(self) -> int:
        """Canaries sent and not yet judged."""
        return len(self._checks)

    @property
    def tick_s(self) -> float:
        """How often the watch looks: a fraction of ``after_s``, at least once a second."""
        return min(1.0, self.after_s / 2)

    async def run(self) -> None:
        """Look every ``tick_s`` seconds, forever (a lifespan task, cancelled at shutdown)."""
        try:
            while True:
                await asyncio.sleep(self.tick_s)
                self.look(time.monotonic())
        finally:
            await self.stop()

    async def stop(self) -> None:
        """Cancel the canaries in flight and wait for them."""
        checks = list(self._checks.values())
        for task in checks:
            task.cancel()
        for task in checks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def look(self, now: float) -> list[asyncio.Task[None]]:
        """Start a canary to every engine that needs one now; the checks started."""
        started = []
        for engine in self.pool.engines:
            if engine.router is None and engine not in self._checks and self.due(engine, now):
                task = asyncio.get_running_loop().create_task(self._check(engine))
                self._checks[engine] = task
                started.append(task)
        return started

    def due(self, engine: Engine, now: float) -> bool:
        """Whether ``engine`` gets a canary now.

        A stalled engine, once its probes pass again, every ``retry_s``; a routed one when a
        call has waited on it ``after_s`` and the engine sent nothing back for as long.
        """
        if engine.stalled:
            return engine.probe_passed and now - engine.canary_at >= self.retry_s
        return (
            engine.healthy
            and engine.longest_wait(now) >= self.after_s
            and now - engine.progress_at >= self.after_s
        )

    async def _check(self, engine: Engine) -> None:
        engine.canary_at = started = time.monotonic()
        try:
            try:
                async with asyncio.timeout(self.timeout_s):
                    answered = await self.canary(engine)
            except TimeoutError:
                answered = False
            alive = answered or engine.progress_at > started  # its traffic counts as an answer
            self.pool.metrics.engine_canary(engine.name, "answered" if alive else "silent")
            if alive:
                await self.pool.canary_answered(engine)
            else:
                await self.pool.eject_stalled(engine)
        finally:
            del self._checks[engine]
