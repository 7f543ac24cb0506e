"""``server/telemetry/waits.py``: the wait clock's union of intervals, and ``deadline``.

``deadline`` stands in for ``asyncio.timeout`` on the hot path, so each test holds it to what
asyncio's own does in the same case.
"""

from __future__ import annotations

import asyncio

import pytest

from rehearsal_gateway.server.telemetry.waits import WaitClock, current_clock, deadline, waiting


async def test_a_block_past_its_deadline_raises_timeout_error() -> None:
    with pytest.raises(TimeoutError):  # the sleep would outlast the test's own timeout
        async with deadline(0.05):
            await asyncio.sleep(3600)
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_block_within_its_deadline_is_left_alone_and_its_timer_goes() -> None:
    async with deadline(0.2):
        await asyncio.sleep(0)
    await asyncio.sleep(0.3)  # a timer left behind would cancel this sleep
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


@pytest.mark.parametrize("bound", [deadline, asyncio.timeout], ids=["deadline", "asyncio"])
async def test_a_cancellation_from_outside_stays_a_cancellation(bound: type) -> None:
    """The client gone or a hung engine's abort cancels the task: never read as a timeout."""
    entered = asyncio.Event()

    async def work() -> None:
        async with bound(5):
            entered.set()
            await asyncio.sleep(5)

    task = asyncio.create_task(work())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("bound", [deadline, asyncio.timeout], ids=["deadline", "asyncio"])
async def test_an_inner_deadline_inside_an_outer_one(bound: type) -> None:
    """The inner bound fires first: its TimeoutError, caught inside the outer, ends nothing else;
    then the outer one fires on its own."""
    seen: list[str] = []

    async def nested() -> None:
        async with bound(0.2):
            try:
                async with bound(0.02):
                    await asyncio.sleep(5)
            except TimeoutError:
                seen.append("inner")
            await asyncio.sleep(5)

    with pytest.raises(TimeoutError):
        await nested()
    assert seen == ["inner"]


async def test_an_error_inside_passes_through() -> None:
    with pytest.raises(ValueError, match="boom"):
        async with deadline(5):
            raise ValueError("boom")


async def test_outside_a_task_it_says_so() -> None:
    loop = asyncio.get_running_loop()

    def outside() -> None:
        coroutine = deadline(1).__aenter__()
        try:
            coroutine.send(None)
        finally:
            coroutine.close()

    # A plain callback runs outside any task.
    future: asyncio.Future[BaseException] = loop.create_future()

    def run() -> None:
        try:
            outside()
        except RuntimeError as exc:
            future.set_result(exc)

    loop.call_soon(run)
    assert "inside a task" in str(await future)


async def test_waits_are_merged_as_a_union() -> None:
    clock = WaitClock()
    token = current_clock.set(clock)
    try:
        with waiting():
            with waiting():  # an overlapping call: counted once
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.05)  # not waiting on anything
    finally:
        current_clock.reset(token)
    assert 0.09 <= clock.waited < 0.14
