"""Real work before imagination on one engine (``RGW_REHEARSAL_YIELD``): who runs, who yields.

On a small engine an imagination slows the real work beside it, whatever its batch slot or vLLM
priority: every decode step runs both (docs/decisions/0013-imagination-yields.md). vLLM's own
scheduler cannot help (it preempts only when KV-cache blocks run out), so the gateway does:
``RealWork`` is one engine's record of the acting calls in flight (pass-through, commits, a
rehearsal's acting turn), by the rehearsal they belong to, and of the rehearsal-role calls that
may be preempted for them.

- an acting call that takes its slot cancels the rehearsal-role calls running there that are not
  its own rehearsal's (``preempt_for``); closing their connections makes vLLM abort them;
- a rehearsal-role call does not start while others' real work runs there, nor until ``quiet_s``
  after the last of it ended (``wait_for``): back-to-back requests leave gaps of a millisecond,
  and an imagination started in one is only cancelled again by the next request, after vLLM
  has spent a prefill on it;
- a rehearsal's own acting calls neither cancel nor hold back its own imaginations (the owner:
  one object per rehearsal; None for a call that is no rehearsal's).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False, slots=True)
class RealWork:
    """One engine's acting calls in flight, by owner, and the imaginations that yield to them."""

    in_flight: int = 0
    owned: Counter[object] = field(default_factory=Counter)
    # The latest end of an acting call here, and the latest by another owner than that one's:
    # what any owner's quiet period needs to know, in two entries however many owners came.
    last: tuple[object, float] | None = None
    before: tuple[object, float] | None = None
    yielding: dict[asyncio.Task[Any], object] = field(default_factory=dict)  # task → owner
    preempted: set[asyncio.Task[Any]] = field(default_factory=set)

    def began(self, owner: object | None) -> None:
        self.in_flight += 1
        if owner is not None:
            self.owned[owner] += 1

    def finished(self, owner: object | None, now: float) -> None:
        self.in_flight -= 1
        if owner is not None:
            self.owned[owner] -= 1
            if not self.owned[owner]:
                del self.owned[owner]
        if self.last is not None and self.last[0] is not owner:
            self.before = self.last
        self.last = (owner, now)

    def wait_for(self, owner: object | None, now: float, quiet_s: float) -> float | None:
        """None when a rehearsal-role call of ``owner`` may start now; else how long until
        others' real work was quiet for ``quiet_s`` (0.0: it still runs)."""
        if self.in_flight - (self.owned.get(owner, 0) if owner is not None else 0):
            return 0.0
        for ended in (self.last, self.before):
            if ended is not None and (owner is None or ended[0] is not owner):
                left = ended[1] + quiet_s - now
                return left if left > 0 else None
        return None

    def watch(self, task: asyncio.Task[Any], owner: object | None) -> None:
        """``task`` runs a rehearsal-role call of ``owner`` here: real work may preempt it."""
        self.yielding[task] = owner

    def unwatch(self, task: asyncio.Task[Any]) -> None:
        self.yielding.pop(task, None)

    def preempt_for(self, owner: object | None) -> int:
        """Cancel the rehearsal-role calls that are not ``owner``'s; each sees ``take_preempt``."""
        tasks = [task for task, of in self.yielding.items() if owner is None or of is not owner]
        for task in tasks:
            del self.yielding[task]
            self.preempted.add(task)
            task.cancel()
        return len(tasks)

    def take_preempt(self, task: asyncio.Task[Any]) -> bool:
        """Whether ``task``'s cancellation was ``preempt_for`` (then it is undone); False too
        when another cancellation is pending: that one wins and must go on."""
        if task not in self.preempted:
            return False
        self.preempted.discard(task)
        task.uncancel()
        return task.cancelling() == 0
