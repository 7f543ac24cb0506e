"""``RealWork``: one engine's record of real work and the imaginations that yield to it."""

from __future__ import annotations

import asyncio

import pytest

from rehearsal_gateway.server.engines.yielding import RealWork


def test_quiet_period_counts_only_others_work_and_forgets_old_endings() -> None:
    work, mine, theirs = RealWork(), object(), object()
    assert work.wait_for(mine, now=10.0, quiet_s=0.5) is None  # nothing ran: start at once
    work.began(theirs)
    work.began(mine)
    assert work.wait_for(mine, 10.0, 0.5) == 0.0  # theirs still runs
    work.finished(theirs, now=10.0)
    assert work.wait_for(theirs, 10.1, 0.5) == 0.0  # mine runs: theirs waits
    assert work.wait_for(mine, 10.1, 0.5) == pytest.approx(0.4)  # theirs ended 0.1 s ago
    work.finished(mine, now=10.2)
    assert work.owned == {}
    assert work.wait_for(theirs, 10.3, 0.5) == pytest.approx(0.4)  # mine ended 0.1 s ago
    assert work.wait_for(None, 10.3, 0.5) == pytest.approx(0.4)  # no owner: every ending counts
    assert work.wait_for(mine, 10.6, 0.5) is None  # theirs ended 0.6 s ago: quiet enough
    assert work.wait_for(theirs, 11.0, 0.5) is None


def test_only_the_latest_endings_of_two_owners_are_kept() -> None:
    """However many rehearsals come and go, two entries answer every owner's question."""
    work, owners = RealWork(), [object() for _ in range(50)]
    for i, owner in enumerate(owners):
        work.began(owner)
        work.finished(owner, now=float(i))
    work.began(owners[-1])
    work.finished(owners[-1], now=60.0)  # the same owner again: the other entry stays
    assert work.last == (owners[-1], 60.0)
    assert work.before == (owners[-2], 48.0)
    assert work.wait_for(owners[-1], 48.2, 0.5) == pytest.approx(0.3)  # the other owner's end
    assert work.wait_for(owners[0], 60.1, 0.5) == pytest.approx(0.4)  # the latest end
    assert work.wait_for(owners[-1], 48.6, 0.5) is None


async def test_preemption_spares_the_owners_own_calls_and_a_second_cancel_wins() -> None:
    work, mine, theirs = RealWork(), object(), object()
    tasks = {owner: asyncio.create_task(asyncio.sleep(30)) for owner in (mine, theirs)}
    for owner, task in tasks.items():
        work.watch(task, owner)
    assert work.preempt_for(mine) == 1
    assert list(work.yielding.values()) == [mine]
    await asyncio.sleep(0)
    assert tasks[theirs].cancelled()
    assert work.take_preempt(tasks[mine]) is False  # never preempted
    assert work.preempt_for(None) == 1  # no owner: every call
    tasks[mine].cancel()  # and something else cancels it too: that cancellation goes on
    assert work.take_preempt(tasks[mine]) is False
    assert work.preempted == {tasks[theirs]}
    work.unwatch(tasks[mine])
    await asyncio.gather(*tasks.values(), return_exceptions=True)
