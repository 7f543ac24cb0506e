"""The retrying engine caller: every chat-completion call to an engine goes through here.

``EngineCalls.call`` (a whole JSON answer) and ``EngineCalls.open_stream`` (a stream whose first
chunk has arrived) take an engine from the pool for a role and move the call to another engine on
connection errors and 5xx — but only while nothing has reached the client yet: once a stream's
first chunk is here, the stream is the caller's. Pass-through calls (``server/chat``) and
rehearsal's own calls (``server/rehearse``) both come here, so they share routing, retries,
limits and timeouts.

Each call has one overall bound (``bound_s``: ``RGW_REQUEST_TIMEOUT`` for a pass-through, what
is left of the rehearsal's deadline plus one commit for a rehearsal call) that covers the wait
for an engine slot and every attempt: a call queues within its bound, and a retry gets what is
left of it. A call whose engine stopped answering (``EngineTimeout`` with ``retryable``) moves
like one whose engine refused it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ..chat_call import PASSTHROUGH
from ..errors import EngineError, EngineTimeout
from ..settings import Role
from .client import CHAT_PATH, EngineClient, EngineStream
from .pool import Engine, EnginePool

# Failures that count toward passive ejection. Not timeouts: a slow engine is busy, not broken
# (a silent one is found by its probes), and not 4xx: the request was at fault.
PASSIVE_KINDS = frozenset(("connect", "reset", "status_5xx", "protocol", "malformed"))


@dataclass(eq=False, slots=True)
class StreamAnswer:
    """An answer still streaming from an engine; ``close`` must run when the relay ends."""

    stream: EngineStream
    pool: EnginePool
    mode: str = PASSTHROUGH
    role: Role = "act"
    headers: dict[str, str] = field(default_factory=dict)
    deadline: float | None = None  # the loop time the whole stream must end by
    samples: int = 1  # the choices it asked for: one slot each (``Engine.slots_for``)
    _released: bool = False

    async def close(self) -> None:
        if self._released:
            return
        self._released = True
        try:
            await self.stream.aclose()
        finally:
            self.pool.release(self.stream.engine, self.role, self.samples)


class EngineCalls:
    """Engine calls for a role, retried on another engine when that is safe."""

    def __init__(self, pool: EnginePool, engines: EngineClient, *, max_attempts: int) -> None:
        self.pool = pool
        self.engines = engines
        self.max_attempts = max_attempts

    def _deadline(self, bound_s: float | None) -> float:
        bound = self.engines.waits.request if bound_s is None else bound_s
        return asyncio.get_running_loop().time() + bound

    @staticmethod
    def _left(deadline: float) -> float:
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            raise EngineTimeout("the call ran out of its time bound before an engine answered")
        return left

    async def call(
        self,
        payload: bytes | None,
        *,
        role: Role,
        model: str | None,
        affinity: bytes,
        label: str,
        path: str = CHAT_PATH,
        method: str = "POST",
        bound_s: float | None = None,
        samples: int = 1,
        candidates: int = 0,
        owner: object | None = None,
    ) -> bytes:
        """One non-streamed engine call for ``role``; retried elsewhere when that is safe.

        ``samples`` and ``candidates``: the slots it takes (``Engine.slots_for``). ``owner``:
        the rehearsal it is part of. A rehearsal-role call that others' real work preempts
        (``RGW_REHEARSAL_YIELD``, ``server/engines/pool.py``) is sent again, within its bound,
        once that work is done; a preemption is no failure of the engine's.
        """
        deadline = self._deadline(bound_s)
        tried: set[str] = set()
        attempts = 0
        while True:
            left = self._left(deadline)
            engine = await self.pool.acquire(
                role, model, affinity, frozenset(tried), left, samples, candidates, owner
            )
            task = self._yielding(engine, role, owner)
            try:
                return await self.engines.chat(
                    engine, payload, label, affinity=affinity, path=path, method=method,
                    bound_s=self._left(deadline),
                )  # fmt: skip
            except EngineError as exc:
                attempts += 1
                self._after_failure(engine, exc, tried, attempts)
            except asyncio.CancelledError:
                if task is None or not engine.real.take_preempt(task):
                    raise
            finally:
                if task is not None:
                    engine.real.unwatch(task)
                self.pool.release(engine, role, samples, candidates, owner)

    def _yielding(
        self, engine: Engine, role: Role, owner: object | None
    ) -> asyncio.Task[Any] | None:
        """Register a rehearsal-role call as one real work may preempt (when yielding is on)."""
        if role != "rehearse" or not self.pool.rehearsal_yield:
            return None
        task = asyncio.current_task()
        assert task is not None  # engine calls run in tasks
        engine.real.watch(task, owner)
        return task

    async def open_stream(
        self,
        payload: bytes,
        *,
        role: Role,
        model: str | None,
        affinity: bytes,
        label: str,
        path: str = CHAT_PATH,
        bound_s: float | None = None,
        samples: int = 1,
    ) -> StreamAnswer:
        """A streamed engine call whose first chunk has arrived; retried elsewhere before it."""
        deadline = self._deadline(bound_s)
        tried: set[str] = set()
        attempts = 0
        while True:
            left = self._left(deadline)
            engine = await self.pool.acquire(role, model, affinity, frozenset(tried), left, samples)
            try:
                stream = await self.engines.open_stream(
                    engine, payload, label, affinity=affinity, path=path,
                    bound_s=self._left(deadline),
                )  # fmt: skip
            except EngineError as exc:
                self.pool.release(engine, role, samples)
                attempts += 1
                self._after_failure(engine, exc, tried, attempts)
                continue
            except BaseException:
                self.pool.release(engine, role, samples)
                raise
            return StreamAnswer(stream, self.pool, role=role, deadline=deadline, samples=samples)

    def _after_failure(
        self, engine: Engine, exc: EngineError, tried: set[str], attempts: int
    ) -> None:
        """Re-raise unless another try may be made.

        A failed engine is not tried again for this call. A router that answered with a failure
        is: the failure was one of its engines', and the router sends the retry to another once
        it has taken that one out (vllm-router's circuit breaker; ``docs/deploy.md``). A router
        that cannot be reached is an engine like any other.
        """
        if exc.kind in PASSIVE_KINDS:
            self.pool.record_failure(engine)
        if engine.router is None or exc.kind == "connect":
            tried.add(engine.name)
        if not exc.retryable or attempts >= self.max_attempts:
            raise exc
        if not any(e.healthy and e.name not in tried for e in self.pool.engines):
            raise exc
