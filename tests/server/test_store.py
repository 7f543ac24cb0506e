"""The rehearsal store on real Redis and in process: same behaviour, every key expiring."""

from __future__ import annotations

import asyncio
import tracemalloc
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from rehearsal_gateway.server.errors import StoreUnavailable
from rehearsal_gateway.server.store.backends import RedisStore, RehearsalStore, dump_value
from rehearsal_gateway.server.store.inprocess import InProcessStore
from rehearsal_gateway.server.store.keys import Keys, Lifetimes
from tests.support.procs import free_port
from tests.support.redis_servers import scratch_store

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture(params=["redis", "in-process"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[RehearsalStore]:
    """A fresh store; the Redis one lives under a unique prefix that is dropped afterwards."""
    lifetimes = Lifetimes(
        memory_max_entries=3, grounding_max_per_tool=2, trust_window=6, trust_max_tools=2
    )
    if request.param == "in-process":
        yield InProcessStore(lifetimes=lifetimes)
        return
    async with scratch_store(REDIS_URL, lifetimes=lifetimes) as redis_store:
        yield redis_store


async def test_trace_round_trips_per_tenant(store: RehearsalStore) -> None:
    """A trace saved by one tenant is read back by it and invisible to another."""
    await store.save_trace("t1", "rh_1", {"mode": "parallel", "candidates": [1, 2]})
    assert await store.load_trace("t1", "rh_1") == {"mode": "parallel", "candidates": [1, 2]}
    assert await store.load_trace("t2", "rh_1") is None


async def test_pending_is_taken_once(store: RehearsalStore) -> None:
    """A pending observation goes to its tenant exactly once, so racing replicas record it once."""
    await store.save_pending("t", "call_a", {"tool": "get_order", "imagined": {"ok": True}})
    assert await store.take_pending("other", "call_a") is None
    assert await store.take_pending("t", "call_a") == {
        "tool": "get_order",
        "imagined": {"ok": True},
    }
    assert await store.take_pending("t", "call_a") is None


async def test_memory_is_capped_newest_first(store: RehearsalStore) -> None:
    """Session memory keeps only the newest entries, newest first."""
    await store.append_memory("t", "s", [{"i": 1}, {"i": 2}])
    await store.append_memory("t", "s", [{"i": 3}, {"i": 4}])
    await store.append_memory("t", "s", [])
    assert await store.recent_memory("t", "s", 10) == [{"i": 4}, {"i": 3}, {"i": 2}]
    assert await store.recent_memory("t", "s", 1) == [{"i": 4}]
    assert await store.recent_memory("other", "s", 10) == []


async def test_grounding_prefers_exact_arguments_then_recent(store: RehearsalStore) -> None:
    """Grounding returns the exact-arguments observation first, then the newest of the tool."""
    await store.save_grounding("t", "get_order", '{"id":1}', {"result": 1})
    await store.save_grounding("t", "get_order", '{"id":2}', {"result": 2})
    await store.save_grounding("t", "get_order", '{"id":3}', {"result": 3})
    assert await store.grounding("t", "get_order", '{"id":2}', 5) == [{"result": 2}, {"result": 3}]
    assert await store.grounding("t", "get_order", '{"id":9}', 1) == [{"result": 3}]
    assert await store.grounding("other", "get_order", '{"id":2}', 5) == []


async def test_trust_counts_pool_halve_and_cap_tools(store: RehearsalStore) -> None:
    """Pairs count per tool and pooled ("*"); past the window a row halves; new tools are capped."""
    for cell in ("oo", "oo", "ee", "oe"):
        await store.record_trust("t", "get:order", cell)  # a colon in the name survives
    assert await store.trust_table("t") == {
        "get:order": {"oo": 2, "ee": 1, "oe": 1},
        "*": {"oo": 2, "ee": 1, "oe": 1},
    }
    for _ in range(3):  # a total of 7 passes the window of 6: every count of the row halves
        await store.record_trust("t", "get:order", "oo")
    table = await store.trust_table("t")
    assert {cell: n for cell, n in table["get:order"].items() if n} == {"oo": 2}
    await store.record_trust("t", "second", "eo")
    await store.record_trust("t", "third", "eo")  # beyond trust_max_tools: pooled only
    table = await store.trust_table("t")
    assert "second" in table
    assert "third" not in table
    assert sum(table["*"].values()) == 4
    assert await store.trust_table("other") == {}


async def test_weighed_veto_cells_are_counted_and_halved_with_the_rest(
    store: RehearsalStore,
) -> None:
    """we/wo (vetoes a commit rule weighed, rehearsal.trust) count and halve like the four."""
    for cell in ("we", "wo", "wo", "ee", "oo"):
        await store.record_trust("t", "tool", cell)
    assert await store.trust_table("t") == {
        "tool": {"we": 1, "wo": 2, "ee": 1, "oo": 1},
        "*": {"we": 1, "wo": 2, "ee": 1, "oo": 1},
    }
    await store.record_trust("t", "tool", "oo")
    await store.record_trust("t", "tool", "wo")  # a total of 7 passes the window of 6
    table = await store.trust_table("t")
    assert {cell: n for cell, n in table["tool"].items() if n} == {"wo": 1, "oo": 1}


async def test_budget_counts_pool_halve_and_cap_tools(store: RehearsalStore) -> None:
    """The learned budget's counts (rehearsal.auto) as trust's: per tool and pooled, a row
    halved once its samples (n + r) pass the window, new tools capped."""
    for cells in (("n",), ("n", "f"), ("r", "rs"), ("r",)):
        await store.record_budget("t", ("get:order",), cells)
    expected = {"n": 2, "f": 1, "r": 2, "rs": 1}
    assert await store.budget_table("t") == {"get:order": expected, "*": expected}
    for _ in range(3):  # 7 samples pass the window of 6: the row halves
        await store.record_budget("t", ("get:order",), ("n",))
    table = await store.budget_table("t")
    assert {cell: n for cell, n in table["get:order"].items() if n} == {"n": 2, "r": 1}
    await store.record_budget("t", ("second", "third"), ("r",))  # third: beyond max_tools
    table = await store.budget_table("t")
    assert ("second" in table, "third" in table) == (True, False)
    assert table["*"]["r"] == 2
    assert await store.budget_table("other") == {}


async def test_every_redis_key_has_a_ttl() -> None:
    """Each kind of key the store writes carries an expiry."""
    keys = Keys(prefix=f"rgwtest-{uuid.uuid4().hex[:8]}:")
    store = RedisStore(REDIS_URL, keys=keys)
    raw = aioredis.Redis.from_url(REDIS_URL)
    try:
        await store.save_trace("t", "rh", {"a": 1})
        await store.save_pending("t", "call", {"a": 1})
        await store.append_memory("t", "s", [{"a": 1}])
        await store.save_grounding("t", "tool", "{}", {"a": 1})
        await store.record_trust("t", "tool", "oo")
        await store.record_budget("t", ("tool",), ("n",))
        found = [key async for key in raw.scan_iter(match=keys.pattern())]
        assert len(found) == 7
        for key in found:
            assert await raw.ttl(key) > 0, key
    finally:
        for key in [key async for key in raw.scan_iter(match=keys.pattern())]:
            await raw.delete(key)
        await raw.aclose()
        await store.close()


async def test_unreachable_redis_raises_store_unavailable() -> None:
    """A Redis that does not answer becomes StoreUnavailable naming the operation."""
    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2)
    with pytest.raises(StoreUnavailable) as caught:
        await store.save_trace("t", "rh", {})
    assert caught.value.op == "save_trace"
    with pytest.raises(StoreUnavailable):
        await store.ping()
    await store.close()


async def test_settled_writes_a_trace_and_its_pending_records(store: RehearsalStore) -> None:
    """One settle keeps the trace and each committed call's pending record, per tenant."""
    await store.save_settled("t", "rh_s", {"id": "rh_s"}, {"call_1": {"n": 1}, "call_2": {"n": 2}})
    assert await store.load_trace("t", "rh_s") == {"id": "rh_s"}
    assert await store.take_pending("t", "call_2") == {"n": 2}
    assert await store.take_pending("other", "call_1") is None


async def test_more_concurrent_commands_than_connections_wait_instead_of_failing() -> None:
    """64 commands on a 4-connection store all succeed: they queue for a permit (no
    MaxConnectionsError, which is what marked answers degraded under load)."""
    keys = Keys(prefix=f"rgwtest-{uuid.uuid4().hex[:8]}:")
    store = RedisStore(REDIS_URL, keys=keys, max_connections=4, timeout_s=2.0)
    try:
        await asyncio.gather(*(store.save_trace("t", f"rh_{i}", {"i": i}) for i in range(64)))
        loaded = await asyncio.gather(*(store.load_trace("t", f"rh_{i}") for i in range(64)))
        assert loaded == [{"i": i} for i in range(64)]
    finally:
        raw = aioredis.Redis.from_url(REDIS_URL)
        async for key in raw.scan_iter(match=keys.pattern()):
            await raw.delete(key)
        await raw.aclose()
        await store.close()


async def test_a_command_waiting_past_the_timeout_for_a_permit_is_store_unavailable() -> None:
    """All permits held: the next command waits the store's timeout, then fails as the store."""
    store = RedisStore(REDIS_URL, max_connections=1, timeout_s=0.1)
    try:
        async with store.permit("held"):
            with pytest.raises(StoreUnavailable) as caught:
                await store.load_trace("t", "rh")
        assert caught.value.op == "load_trace"
        assert "busy" in caught.value.message
    finally:
        await store.close()


def test_in_process_store_is_bounded_by_bytes_as_measured() -> None:
    """Past max_bytes the oldest keys go, and the memory really held stays near the bound."""
    bound = 4 * 1024 * 1024
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        store = InProcessStore(max_bytes=bound)
        trace = {"trace": ["x" * 100 for _ in range(40)], "id": "rh"}  # ~4.5 kB serialized
        for i in range(5_000):  # ~22 MB written in all
            store._set(f"rgw:trace:{{t:rh_{i}}}", dump_value({**trace, "i": i}), 3600)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert store.bytes <= bound
    assert 500 < len(store) < 5_000  # some kept, the oldest dropped
    assert held < 1.25 * bound, held  # the estimate does not undercount what is really held
    assert held > 0.5 * bound, held  # nor overcount it wildly (the bound means what it says)
    assert store._get("rgw:trace:{t:rh_4999}") is not None
    assert store._get("rgw:trace:{t:rh_0}") is None


async def test_in_process_store_counts_bytes_of_every_kind_and_frees_them() -> None:
    """Lists, trust tables and taken records are counted in and out of the byte total."""
    store = InProcessStore()
    await store.append_memory("t", "s", [{"a": 1}, {"b": 2}])
    await store.save_grounding("t", "tool", "{}", {"r": 1})
    await store.record_trust("t", "tool", "oo")
    await store.save_pending("t", "call", {"x": "y" * 1000})
    with_pending = store.bytes
    assert await store.take_pending("t", "call") is not None
    assert with_pending - store.bytes > 1000
    await store.close()
    assert store.bytes == 0
