"""The helpers that spare the hot path its system calls (server/telemetry/syscalls.py)."""

from __future__ import annotations

import asyncio
import os
import re
import threading

import pytest

from server.telemetry import syscalls
from server.telemetry.syscalls import POOL_BYTES, random_hex, running_loop, this_task


def test_running_loop_is_the_loop_running_now_even_after_another_ran() -> None:
    async def both() -> tuple[object, object]:
        return running_loop(), asyncio.get_running_loop()

    first = asyncio.run(both())
    second = asyncio.run(both())
    assert first[0] is first[1]
    assert second[0] is second[1]
    assert second[0] is not first[0]  # the first loop stopped: it is asked again


def test_outside_a_loop_it_raises_as_asyncio_does() -> None:
    asyncio.run(asyncio.sleep(0))  # a loop remembered, then closed
    with pytest.raises(RuntimeError):
        running_loop()
    with pytest.raises(RuntimeError):
        this_task()


def test_each_thread_gets_the_loop_it_runs() -> None:
    seen: dict[str, tuple[object, object]] = {}
    both_running = threading.Barrier(2)

    def run(name: str) -> None:
        async def main() -> None:
            await asyncio.to_thread(both_running.wait, 10)  # both loops are running now
            seen[name] = (running_loop(), asyncio.get_running_loop())

        asyncio.run(main())

    threads = [threading.Thread(target=run, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert seen["a"][0] is seen["a"][1]
    assert seen["b"][0] is seen["b"][1]
    assert seen["a"][0] is not seen["b"][0]


def test_this_task_is_the_current_task_and_none_in_a_callback_is_an_error() -> None:
    async def main() -> None:
        assert this_task() is asyncio.current_task()
        inner = asyncio.create_task(asyncio.sleep(0, result=None))
        assert await asyncio.create_task(_task_of()) is not this_task()
        await inner
        failed = asyncio.get_running_loop().create_future()

        def callback() -> None:
            try:
                this_task()
            except RuntimeError as exc:
                failed.set_result(exc)

        asyncio.get_running_loop().call_soon(callback)
        assert isinstance(await failed, RuntimeError)

    asyncio.run(main())


async def _task_of() -> asyncio.Task[object]:
    return this_task()


def test_random_hex_is_hex_of_the_asked_length_and_never_repeats() -> None:
    ids = [random_hex(12) for _ in range(3 * POOL_BYTES // 12)]  # across pool refills
    assert all(re.fullmatch(r"[0-9a-f]{24}", value) for value in ids)
    assert len(set(ids)) == len(ids)
    assert len(random_hex(POOL_BYTES + 5)) == 2 * (POOL_BYTES + 5)  # more than a pool holds
    assert len(random_hex(1)) == 2


def test_a_forked_child_draws_other_ids_than_its_parent() -> None:
    random_hex(8)  # the pool is filled and partly spent
    assert syscalls._here.at > 0
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, then out without pytest's teardown
        try:
            os.write(write_end, random_hex(8).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    parent_id = random_hex(8)
    with os.fdopen(read_end, "rb") as pipe:
        child_id = pipe.read().decode()
    os.waitpid(pid, 0)
    assert re.fullmatch(r"[0-9a-f]{16}", child_id)
    assert child_id != parent_id  # without the at-fork reset both read the same bytes
