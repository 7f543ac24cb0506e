"""How long a request waited on engines or the store, so its own overhead can be told apart.

The gateway's overhead (DESIGN §7) is the request's wall time minus the time during which at
least one engine or store call was in flight. Calls overlap (a parallel rehearsal imagines four
results at once), so waits are merged as a union, not summed. A ``WaitClock`` lives in a context
variable for the duration of one request; tasks spawned by the request (a planner's branches)
inherit it, so every ``waiting()`` block anywhere below the route counts toward the same clock.
"""

from __future__ import annotations

import time
from contextvars import ContextVar


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
