"""Store writes that only feed hindsight, run beside the answer instead of before it.

A rehearsal's trace and pending records, and what a real tool result teaches (trust counts,
grounding, session memory, the trace's feedback note) are read by later requests, never by the
answer being written. ``StoreWriter.submit`` starts each such write as a task of its own and
returns at once, so neither Redis's latency nor its failure reaches the response: a failed
write is counted (``rehearsal_gateway_store_writes_total{outcome="failed"}``) and the answer
went out whole.

The writer is owned by the app's lifespan. At most ``max_pending`` writes are held (beyond that
a write is dropped and counted, which bounds memory when Redis hangs), at most ``concurrency``
talk to Redis at once (the request path keeps the rest of the store's connections), and
``close`` waits up to a grace for every write still held: on a healthy Redis nothing is lost at
shutdown.

A write may carry **marks** (``("pending", tenant, tool_call_id)``, ``("trace", tenant, id)``):
a reader that must see a write it knows of (the next turn taking its pending record, ``GET
/v1/rehearsals/{id}``) first waits, bounded, for the latest write with that mark
(``settled``). Each write runs in a fresh ``contextvars`` context, so its Redis time never counts
as some finished request's waiting (``server/telemetry/waits.py``).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Any

from ..errors import StoreUnavailable
from ..telemetry.metrics import GatewayMetrics

log = logging.getLogger("rehearsal_gateway.server")

Write = Callable[[], Awaitable[None]]


class StoreWriter:
    """Background store writes: bounded in number and concurrency, drained on close."""

    def __init__(
        self,
        metrics: GatewayMetrics,
        *,
        max_pending: int = 10_000,
        concurrency: int = 32,
        settle_wait_s: float = 1.0,
        behind: int = 256,
    ) -> None:
        self.metrics = metrics
        self.max_pending = max_pending
        self.behind = behind
        self.settle_wait_s = settle_wait_s
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks: dict[asyncio.Task[None], tuple[str, tuple[Hashable, ...]]] = {}
        self._marks: dict[Hashable, asyncio.Task[None]] = {}
        self._started: set[asyncio.Task[None]] = set()
        self._held: dict[Hashable, tuple[asyncio.Task[None], dict[str, Any], str]] = {}
        self._closed = False

    @property
    def pending(self) -> int:
        """Writes submitted and not finished yet."""
        return len(self._tasks)

    def submit(
        self,
        op: str,
        write: Write,
        *,
        marks: Iterable[Hashable] = (),
        after: Iterable[Hashable] = (),
    ) -> asyncio.Task[None] | None:
        """Start ``write`` in the background; ``None`` when it was dropped (closed or full).

        ``after``: marks whose latest writes this one waits for first (each at most
        ``settle_wait_s``, and before it takes a slot, so waiting writes never hold up others).
        """
        if self._closed or len(self._tasks) >= self.max_pending:
            self.metrics.store_write(op, "dropped")
            log.warning("store write %s dropped (%d held, closed=%s)", op, self.pending,
                        self._closed)  # fmt: skip
            return None
        before = [task for mark in after if (task := self._marks.get(mark)) is not None]
        task = asyncio.create_task(self._run(op, write, before), context=contextvars.Context())
        held = tuple(marks)
        self._tasks[task] = (op, held)
        for mark in held:
            self._marks[mark] = task
        task.add_done_callback(self._finished)
        return task

    async def _run(self, op: str, write: Write, before: list[asyncio.Task[None]]) -> None:
        if before:
            await asyncio.wait(before, timeout=self.settle_wait_s)
        async with self._slots:
            task = asyncio.current_task()
            if task is not None:
                self._started.add(task)  # from here on its held values are being written
            try:
                await write()
            except StoreUnavailable as exc:
                self.metrics.store_error(exc.op)
                self.metrics.store_write(op, "failed")
                return
            except Exception:  # a bug in a write: nobody awaits this task, so say it here
                log.exception("store write %s failed", op)
                self.metrics.store_write(op, "failed")
                return
        self.metrics.store_write(op, "written")

    def _finished(self, task: asyncio.Task[None]) -> None:
        _op, held = self._tasks.pop(task, ("", ()))
        self._started.discard(task)
        for mark in held:
            if self._marks.get(mark) is task:
                del self._marks[mark]
            entry = self._held.get(mark)
            if entry is not None and entry[0] is task:
                del self._held[mark]

    def hold(self, mark: Hashable, task: asyncio.Task[None] | None, values: dict[str, Any],
             key: str) -> None:  # fmt: skip
        """``values[key]`` is what ``task`` (a write carrying ``mark``) will write."""
        if task is not None and task in self._tasks:
            self._held[mark] = (task, values, key)
            op, marks = self._tasks[task]
            if mark not in marks:  # so that the entry goes when the task does
                self._tasks[task] = (op, (*marks, mark))

    def take_held(self, mark: Hashable) -> Any | None:
        """Take a held value before its write starts, so it is never written; else ``None``.

        Under load the writes run seconds behind the answers (a 10-minute soak at 64 clients on
        2 busy cores ended with a 3.9 s backlog), and a client answering its tool call sooner
        found no pending record: half the feedback was lost. Taken here, in the process that
        committed the call, it never waits and never reaches Redis.
        """
        entry = self._held.pop(mark, None)
        if entry is None:
            return None
        task, values, key = entry
        if task in self._started or task.done():
            return None  # being written or written: the store has it
        return values.pop(key, None)

    async def keep_up(self, task: asyncio.Task[None] | None) -> None:
        """Past ``behind`` held writes, wait (at most ``settle_wait_s``) for ``task``.

        Backpressure for overload only: in a 10-minute soak at 64 clients on 2 busy cores the
        writes fell 12 s behind and the held traces grew the gateway's RSS from 80 to 130 MB. A
        request that settles while the writer is that far behind waits for its own write, as
        every request did before the writer, so the backlog (and its memory) stays bounded.
        """
        if task is not None and len(self._tasks) > self.behind:
            await asyncio.wait((task,), timeout=self.settle_wait_s)

    async def settled(self, mark: Hashable) -> None:
        """Wait (at most ``settle_wait_s``) for the latest held write carrying ``mark``."""
        task = self._marks.get(mark)
        if task is not None:
            await asyncio.wait((task,), timeout=self.settle_wait_s)

    async def settled_all(self, wait_s: float) -> None:
        """Wait (at most ``wait_s``) for every write held now."""
        if self._tasks:
            await asyncio.wait(tuple(self._tasks), timeout=wait_s)

    async def close(self, grace_s: float) -> int:
        """Take no more writes, wait up to ``grace_s`` for those held; how many were cut."""
        self._closed = True
        await self.settled_all(grace_s)
        cut = list(self._tasks.items())
        for task, (op, _marks) in cut:
            task.cancel()
            self.metrics.store_write(op, "cut")
        if cut:
            await asyncio.wait([task for task, _ in cut])
            log.warning("%d store write(s) were still running after %.1f s and were cut",
                        len(cut), grace_s)  # fmt: skip
        return len(cut)
