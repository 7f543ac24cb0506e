"""How long a request waited on engines or the store, so its own overhead can be told apart;
and ``deadline``, the bound on such a wait.

The gateway's overhead (DESIGN §7) is the request's wall time minus the time during which at
least one engine or store call was in flight. Calls overlap (a parallel rehearsal imagines four
results at once), so waits are merged as a union, not summed. A ``WaitClock`` lives in a context
variable for the duration of one request; tasks spawned by the request (a planner's branches)
inherit it, so every ``waiting()`` block anywhere below the route counts toward the same clock.
"""

from __future__ import annotations

import asyncio
import time
from contextvars import ContextVar
from types import TracebackType


class WaitClock:
    """The union of one request's waiting intervals."""

    __slots__ = ("_depth", "_since", "waited")

    def __init__(self) -> None:
        self._depth = 0
        self._since = 0.0
        self.waited = 0.0

    def enter(self) -> None:
        if self._depth == 0:
            self._since = time.perf_counter()
        self._depth += 1

    def leave(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.waited += time.perf_counter() - self._since


current_clock: ContextVar[WaitClock | None] = ContextVar("rgw_wait_clock", default=None)


class waiting:  # lower case: it reads as a function, ``with waiting():``
    """Count the block as time spent waiting on something outside the gateway.

    A class, not a ``@contextmanager`` generator: it runs around every engine and store call,
    and the generator's machinery was six Python calls a time against two here.
    """

    __slots__ = ("_clock",)

    def __enter__(self) -> None:
        self._clock = clock = current_clock.get()
        if clock is not None:
            clock.enter()

    def __exit__(self, *exc: object) -> None:
        if self._clock is not None:
            self._clock.leave()


class deadline:  # lower case: it reads as ``asyncio.timeout`` does, ``async with deadline(s):``
    """``asyncio.timeout(delay)`` on the hot path: the same contract in a third of its Python.

    At ``delay`` seconds the task is cancelled, and that cancellation leaves the block as
    ``TimeoutError``; any other cancellation (the client gone, a hung engine's abort, shutdown)
    stays a cancellation. Which one it was is told as asyncio tells it: the task's cancel
    requests, counted on entry, against ``Task.uncancel`` on exit. asyncio's ``Timeout`` is a
    state machine that can be rescheduled and read, which a pass-through's two blocks never do;
    this keeps only the contract (docs/decisions/0002-lean-wire-and-tallied-metrics.md).
    """

    __slots__ = ("_cancelling", "_delay", "_fired", "_handle", "_task")

    def __init__(self, delay: float) -> None:
        self._delay = delay

    async def __aenter__(self) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("deadline() is used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._fired = False
        self._handle = task.get_loop().call_later(self._delay, self._fire)

    def _fire(self) -> None:
        self._fired = True
        self._task.cancel()

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._handle.cancel()
        # uncancel() only for a cancellation of ours; a TimeoutError only if it was the last.
        if (
            self._fired
            and self._task.uncancel() <= self._cancelling
            and kind is asyncio.CancelledError
        ):
            raise TimeoutError from exc
