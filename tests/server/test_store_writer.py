"""Store writes beside the answer: on real Redis, none lost when healthy, bounded when it is not."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import pytest

from rehearsal_gateway.server.store.backends import RedisStore
from rehearsal_gateway.server.store.writer import StoreWriter
from rehearsal_gateway.server.telemetry.metrics import GatewayMetrics
from tests.support.procs import free_port
from tests.support.redis_servers import scratch_store, start_redis

REDIS_URL = "redis://127.0.0.1:6379/0"


def _count(metrics: GatewayMetrics, op: str, outcome: str) -> float:
    value = metrics.registry.get_sample_value(
        "rehearsal_gateway_store_writes_total", {"op": op, "outcome": outcome}
    )
    return value or 0.0


@pytest.fixture
async def store() -> AsyncIterator[RedisStore]:
    async with scratch_store(REDIS_URL) as redis_store:
        yield redis_store


async def test_nothing_is_lost_on_a_healthy_redis_and_close_drains(store: RedisStore) -> None:
    """2,000 writes submitted at once are all in Redis after close, none failed or dropped."""
    metrics = GatewayMetrics()
    writer = StoreWriter(metrics, concurrency=8)
    for i in range(2_000):
        writer.submit("settle", partial(store.save_trace, "t", f"rh_{i}", {"i": i}))
    assert writer.pending > 0  # submit returned before the writes ran
    assert await writer.close(grace_s=30) == 0
    loaded = await asyncio.gather(*(store.load_trace("t", f"rh_{i}") for i in (0, 999, 1999)))
    assert loaded == [{"i": 0}, {"i": 999}, {"i": 1999}]
    assert _count(metrics, "settle", "written") == 2_000
    assert _count(metrics, "settle", "failed") == _count(metrics, "settle", "dropped") == 0


async def test_a_reader_waits_for_the_write_it_must_see(store: RedisStore) -> None:
    """settled(mark) returns once the marked write is done; the record is then there."""
    writer = StoreWriter(GatewayMetrics())

    async def slow_save() -> None:
        await asyncio.sleep(0.2)
        await store.save_pending("t", "call_x", {"tool": "get_order"})

    writer.submit("settle", slow_save, marks=[("pending", "t", "call_x")])
    assert await store.take_pending("t", "call_x") is None  # not yet written
    await writer.settled(("pending", "t", "call_x"))
    assert await store.take_pending("t", "call_x") == {"tool": "get_order"}
    await writer.settled(("pending", "t", "unknown"))  # nothing held: returns at once
    await writer.close(grace_s=5)


async def test_a_write_after_others_waits_for_them_without_holding_a_slot() -> None:
    """``after`` orders two writes even when the writer has a single slot."""
    writer = StoreWriter(GatewayMetrics(), concurrency=1)
    order: list[str] = []

    async def first() -> None:
        await asyncio.sleep(0.1)
        order.append("first")

    async def second() -> None:
        order.append("second")

    writer.submit("feedback", second, after=[("trace", "t", "rh")])  # nothing to wait for
    writer.submit("settle", first, marks=[("trace", "t", "rh")])
    writer.submit("feedback", second, after=[("trace", "t", "rh")])
    await writer.close(grace_s=5)
    assert order == ["second", "first", "second"]


async def test_a_failed_write_is_counted_and_never_raised() -> None:
    """Redis unreachable: the write fails in the background, counted as failed and as its op."""
    metrics = GatewayMetrics()
    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2)
    writer = StoreWriter(metrics)
    task = writer.submit("settle", partial(store.save_trace, "t", "rh", {}))
    assert task is not None
    await task
    assert _count(metrics, "settle", "failed") == 1
    errors = metrics.registry.get_sample_value(
        "rehearsal_gateway_store_errors_total", {"op": "save_trace"}
    )
    assert errors == 1
    await writer.close(grace_s=1)
    await store.close()


async def test_a_full_or_closed_writer_drops_and_counts() -> None:
    """Beyond max_pending (a hung Redis) and after close, writes are dropped, not queued."""
    metrics = GatewayMetrics()
    writer = StoreWriter(metrics, max_pending=2)
    gate = asyncio.Event()
    assert writer.submit("feedback", gate.wait) is not None
    assert writer.submit("feedback", gate.wait) is not None
    assert writer.submit("feedback", gate.wait) is None
    assert _count(metrics, "feedback", "dropped") == 1
    gate.set()
    assert await writer.close(grace_s=5) == 0
    assert writer.submit("feedback", gate.wait) is None
    assert _count(metrics, "feedback", "dropped") == 2


async def test_close_cuts_what_outlives_the_grace(tmp_path: Path) -> None:
    """A Redis stopped mid-write (SIGSTOP) cannot hold shutdown past the grace."""
    proc = start_redis(tmp_path / "redis", free_port())
    store = RedisStore(f"redis://127.0.0.1:{proc.port}/0", timeout_s=30)
    metrics = GatewayMetrics()
    writer = StoreWriter(metrics)
    try:
        await store.ping()
        proc.popen.send_signal(signal.SIGSTOP)
        writer.submit("settle", partial(store.save_trace, "t", "rh", {}))
        started = time.monotonic()
        assert await writer.close(grace_s=0.5) == 1
        assert time.monotonic() - started < 30  # cut, not left to the store's own 30 s timeout
        assert _count(metrics, "settle", "cut") == 1
    finally:
        proc.popen.send_signal(signal.SIGCONT)
        proc.stop()
        await store.close()


async def test_an_unexpected_error_in_a_write_is_logged_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A bug in a write is not swallowed silently: it is logged with its traceback."""
    metrics = GatewayMetrics()
    writer = StoreWriter(metrics)

    async def broken() -> None:
        raise KeyError("boom")

    task = writer.submit("feedback", broken)
    assert task is not None
    await task
    assert _count(metrics, "feedback", "failed") == 1
    assert "store write feedback failed" in caplog.text
    await writer.close(grace_s=1)


async def test_a_held_record_is_taken_before_its_write_and_never_written(
    store: RedisStore,
) -> None:
    """A backlog (one slot, busy): the next turn takes the pending record from the writer at
    once, and the settle write that runs later leaves it out; once a write started, no take."""
    writer = StoreWriter(GatewayMetrics(), concurrency=1)
    gate = asyncio.Event()
    writer.submit("feedback", gate.wait)  # holds the only slot
    pending = {"call_a": {"tool": "a"}, "call_b": {"tool": "b"}}
    task = writer.submit("settle", partial(store.save_settled, "t", "rh", {"id": "rh"}, pending))
    assert task is not None
    for call_id in pending:
        writer.hold(("pending", "t", call_id), task, pending, call_id)
    assert writer.take_held(("pending", "t", "call_a")) == {"tool": "a"}
    assert writer.take_held(("pending", "t", "call_a")) is None  # taken once
    gate.set()
    await task
    assert writer.take_held(("pending", "t", "call_b")) is None  # written: the store has it
    assert await store.take_pending("t", "call_a") is None
    assert await store.take_pending("t", "call_b") == {"tool": "b"}
    assert await store.load_trace("t", "rh") == {"id": "rh"}
    await writer.close(grace_s=5)


async def test_a_writer_far_behind_makes_the_submitter_wait_for_its_write() -> None:
    """Below ``behind`` held writes keep_up returns at once; above, it waits for the write."""
    writer = StoreWriter(GatewayMetrics(), behind=2)
    gate = asyncio.Event()
    first = writer.submit("settle", gate.wait)
    await writer.keep_up(first)  # one held: no wait (the gate is shut: a wait never returns)
    writer.submit("settle", gate.wait)
    asyncio.get_running_loop().call_later(0.2, gate.set)
    third = writer.submit("settle", gate.wait)
    await writer.keep_up(third)  # three held: waits until the gate opens
    assert third is not None
    assert third.done()
    await writer.close(grace_s=5)
