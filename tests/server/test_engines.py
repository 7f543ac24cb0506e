"""Routing decisions of the engine pool, without HTTP: affinity, fallback, limits, waiting."""

from __future__ import annotations

import asyncio

import pytest

from rehearsal_gateway.server.engines.engine import rehearsal_slots
from rehearsal_gateway.server.engines.pool import (
    Engine,
    EnginePool,
    EnginesReady,
    Probe,
    affinity_key,
)
from rehearsal_gateway.server.errors import EngineOverloaded, EngineUnavailable, ModelNotFound
from rehearsal_gateway.server.settings import ALL_ROLES, EngineSpec, Role
from rehearsal_gateway.server.telemetry.metrics import GatewayMetrics


def make_pool(count: int = 3, limit: int = 2, share: float = 1.0, **options: object) -> EnginePool:
    specs = [
        EngineSpec(url=f"http://e{i}:80/v1", name=f"e{i}", model="m", **options)  # type: ignore[arg-type]
        for i in range(count)
    ]
    pool = EnginePool.from_specs(
        specs, GatewayMetrics(), default_concurrency=limit, aliases={"pub": "m"},
        queue_timeout=0.2, rehearsal_share=share,
    )  # fmt: skip
    for engine in pool.engines:
        pool.apply(engine, Probe(healthy=True))
    return pool


def route(pool: EnginePool, key: bytes) -> Engine:
    engine = pool.choose("act", "m", key, frozenset())
    assert engine is not None
    return engine


def test_affinity_key_precedence() -> None:
    """Session header beats ``user``, which beats the conversation's first two messages."""
    first = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    later = [*first, {"role": "assistant", "content": "a"}]
    assert affinity_key("sess", "bob", first) == affinity_key("sess", "alice", later)
    assert affinity_key(None, "bob", first) == affinity_key(None, "bob", later)
    assert affinity_key(None, None, first) == affinity_key(None, None, later)
    assert affinity_key(None, None, first) != affinity_key(None, None, first[:1])
    assert affinity_key("x", None, first) != affinity_key(None, "x", first)


def test_a_key_matters_with_a_choice_of_engines_or_a_router() -> None:
    """One plain engine: every call lands on it, so a pass-through builds no key. Two, none yet
    (discovery), or a router that hashes the key itself: it does."""
    assert not make_pool(count=1).keyed
    assert make_pool(count=2).keyed
    assert make_pool(count=0).keyed
    assert make_pool(count=1, router="vllm-router").keyed


def test_same_key_same_engine_and_keys_spread() -> None:
    """One key always lands on one engine; many keys use every engine."""
    pool = make_pool()
    assert len({route(pool, b"k1").name for _ in range(20)}) == 1
    assert {route(pool, f"k{i}".encode()).name for i in range(60)} == {"e0", "e1", "e2"}


def test_losing_an_engine_moves_only_its_sessions() -> None:
    """Rendezvous hashing: sessions of healthy engines stay put when another engine dies."""
    pool = make_pool()
    keys = [f"k{i}".encode() for i in range(90)]
    before = {key: route(pool, key).name for key in keys}
    pool.mark_unreachable(pool.engines[0])
    after = {key: route(pool, key).name for key in keys}
    moved = [key for key in keys if before[key] != after[key]]
    assert moved
    assert all(before[key] == "e0" for key in moved)
    assert "e0" not in after.values()


def test_unhealthy_or_full_preferred_engine_falls_back_to_least_loaded() -> None:
    """The fallback is the healthy engine with the lowest load, counting its queue."""
    pool = make_pool(limit=4)
    preferred = route(pool, b"key")
    others = [e for e in pool.engines if e is not preferred]
    others[0].in_flight = 2
    others[1].in_flight = 1
    preferred.in_flight = 4  # full
    assert route(pool, b"key") is others[1]
    preferred.in_flight = 0
    pool.apply(preferred, Probe(healthy=False))
    pool.apply(others[1], Probe(healthy=True, queue_depth=8))  # busy behind its own queue
    assert route(pool, b"key") is others[0]


def test_no_healthy_engine_is_unavailable() -> None:
    """With every engine down, choosing raises EngineUnavailable (a 503)."""
    pool = make_pool()
    for engine in pool.engines:
        pool.apply(engine, Probe(healthy=False))
    with pytest.raises(EngineUnavailable):
        pool.choose("act", "m", b"k", frozenset())


def test_roles_models_and_aliases() -> None:
    """Only engines with the role and model are candidates; aliases resolve; unknown is 404."""
    pool = make_pool(count=2, roles=frozenset({"rehearse"}))
    with pytest.raises(EngineUnavailable):
        pool.choose("act", "m", b"k", frozenset())
    assert route_role(pool, "rehearse").name in {"e0", "e1"}
    assert pool.resolve_model("pub") == "m"
    assert pool.resolve_model(None) is None
    with pytest.raises(ModelNotFound):
        pool.resolve_model("nope")


def route_role(pool: EnginePool, role: str) -> Engine:
    engine = pool.choose(role, "m", b"k", frozenset())  # type: ignore[arg-type]
    assert engine is not None
    return engine


async def test_full_pool_waits_for_a_slot_then_times_out() -> None:
    """When every engine is full, acquire waits for a release, and gives up after the timeout."""
    pool = make_pool(count=2, limit=1)
    held = [await pool.acquire("act", "m", f"k{i}".encode()) for i in range(2)]
    waiter = asyncio.create_task(pool.acquire("act", "m", b"late"))
    await asyncio.sleep(0.02)
    assert not waiter.done()
    pool.release(held[0], "act")
    assert await asyncio.wait_for(waiter, 1) is held[0]
    with pytest.raises(EngineOverloaded):
        await pool.acquire("act", "m", b"later")
    assert [e.in_flight for e in pool.engines] == [1, 1]


def test_engine_urls_and_default_names() -> None:
    """``/v1`` is added when missing; health lives at the root; the default name is host:port."""
    engine = Engine(EngineSpec(url="http://h:9/"), 1)
    assert (engine.base_url, engine.root_url, engine.name) == ("http://h:9/v1", "http://h:9", "h:9")


async def test_waiters_woken_together_never_exceed_the_concurrency_limit() -> None:
    """Callers queued for a full engine take its freed slots one at a time, never over the limit."""
    pool = make_pool(count=1, limit=1)
    pool.queue_timeout = 5.0
    engine = pool.engines[0]
    peak = 0

    async def one_call(key: bytes) -> None:
        nonlocal peak
        acquired = await pool.acquire("act", "m", key)
        peak = max(peak, acquired.in_flight)
        await asyncio.sleep(0.005)
        pool.release(acquired, "act")

    await asyncio.gather(*(one_call(f"k{i}".encode()) for i in range(6)))
    assert peak == 1
    assert engine.in_flight == 0


async def test_replacing_a_group_keeps_members_and_moves_only_departed_sessions() -> None:
    """Members that stay keep their state; only sessions of a departed engine change engine."""
    pool = make_pool(count=1)
    group = [
        EngineSpec(url=f"http://10.0.0.{i}:80/v1", name=f"g/{i}", model="m") for i in (1, 2, 3)
    ]
    joined = pool.replace_group("g", group, default_concurrency=2)
    assert [engine.name for engine in joined] == ["g/1", "g/2", "g/3"]
    await pool.check(joined, lambda engine: _healthy())
    keys = [f"s{i}".encode() for i in range(40)]
    before = {key: route(pool, key).name for key in keys}
    kept = next(engine for engine in pool.engines if engine.name == "g/2")
    kept.in_flight = 1

    assert pool.replace_group("g", [group[1], group[2]], default_concurrency=2) == []
    after = {key: route(pool, key).name for key in keys}
    assert "g/1" not in after.values()
    assert {k for k in keys if before[k] != after[k]} == {k for k in keys if before[k] == "g/1"}
    assert next(e for e in pool.engines if e.name == "g/2") is kept
    assert kept.in_flight == 1
    assert [e.name for e in pool.engines] == ["e0", "g/2", "g/3"]


async def _healthy() -> Probe:
    return Probe(healthy=True, models=("m",))


@pytest.mark.parametrize(
    ("limit", "share", "roles", "slots"),
    [
        pytest.param(8, 0.5, ALL_ROLES, 4, id="half-of-8"),
        pytest.param(100, 0.29, ALL_ROLES, 29, id="rounding-error-not-a-slot-less"),
        pytest.param(10, 0.25, ALL_ROLES, 2, id="rounded-down"),
        pytest.param(1, 0.5, ALL_ROLES, 1, id="at-least-one"),
        pytest.param(8, 1.0, ALL_ROLES, 8, id="no-reservation"),
        pytest.param(8, 0.5, frozenset({"rehearse"}), 8, id="rehearsal-only-engine-keeps-all"),
    ],
)
def test_rehearsal_share_of_an_engines_slots(
    limit: int, share: float, roles: frozenset[Role], slots: int
) -> None:
    """Rehearsal's slots: the share rounded down, at least one, all where nothing real runs."""
    assert rehearsal_slots(EngineSpec(url="http://e:80", roles=roles), limit, share) == slots
    pool = make_pool(count=1, limit=limit, share=share, roles=roles)
    assert pool.engines[0].rehearse_limit == slots


async def test_rehearsal_calls_leave_the_reserved_slots_to_real_work() -> None:
    """At share 0.5 of 4 slots rehearsal holds 2 and waits; acting calls take the other 2."""
    pool = make_pool(count=1, limit=4, share=0.5)
    engine = pool.engines[0]
    imagining = [await pool.acquire("rehearse", "m", f"r{i}".encode()) for i in range(2)]
    third = asyncio.create_task(pool.acquire("rehearse", "m", b"r2"))
    await asyncio.sleep(0.02)
    assert not third.done()
    acting = [await pool.acquire("act", "m", f"a{i}".encode(), within=0.05) for i in range(2)]
    assert (engine.in_flight, engine.rehearse_in_flight) == (4, 2)
    pool.release(acting[0], "act")  # a real slot freed: still not rehearsal's
    await asyncio.sleep(0.02)
    assert not third.done()
    pool.release(imagining[0], "rehearse")  # one of rehearsal's own: the waiter takes it
    assert await asyncio.wait_for(third, 1) is engine
    assert (engine.in_flight, engine.rehearse_in_flight) == (3, 2)
    for held, role in (
        (imagining[1], "rehearse"),
        (third.result(), "rehearse"),
        (acting[1], "act"),
    ):
        pool.release(held, role)  # type: ignore[arg-type]
    assert (engine.in_flight, engine.rehearse_in_flight) == (0, 0)


async def test_a_freed_slot_goes_to_waiting_real_work_before_an_earlier_rehearsal_call() -> None:
    """A rehearsal call that began to wait first still lets a waiting acting call in first."""
    pool = make_pool(count=1, limit=2)  # no reservation: only the wake-up order is tested
    pool.queue_timeout = 5.0
    held = [await pool.acquire("act", "m", b"a0"), await pool.acquire("rehearse", "m", b"r0")]
    rehearsal = asyncio.create_task(pool.acquire("rehearse", "m", b"r1"))
    await asyncio.sleep(0.01)
    real = asyncio.create_task(pool.acquire("act", "m", b"a1"))
    await asyncio.sleep(0.01)
    pool.release(held[0], "act")
    assert await asyncio.wait_for(real, 1) is pool.engines[0]
    await asyncio.sleep(0.02)
    assert not rehearsal.done()  # the engine is full again: the rehearsal call waits on
    pool.release(held[1], "rehearse")
    assert await asyncio.wait_for(rehearsal, 1) is pool.engines[0]


async def test_rehearsal_is_not_held_back_by_real_work_waiting_for_another_model() -> None:
    """Only acting calls that could use the engine keep a rehearsal call out of its free slot."""
    specs = [EngineSpec(url="http://a:80", name="a", model="m"),
             EngineSpec(url="http://b:80", name="b", model="other")]  # fmt: skip
    pool = EnginePool.from_specs(
        specs, GatewayMetrics(), default_concurrency=1, aliases={}, queue_timeout=5.0
    )
    for engine in pool.engines:
        pool.apply(engine, Probe(healthy=True))
    busy = await pool.acquire("act", "m", b"a0")
    waiting = asyncio.create_task(pool.acquire("act", "m", b"a1"))  # only engine a serves "m"
    await asyncio.sleep(0.01)
    assert (await pool.acquire("rehearse", "other", b"r", within=0.05)).name == "b"
    pool.release(busy, "act")
    assert (await asyncio.wait_for(waiting, 1)).name == "a"


async def test_rehearsal_call_without_a_slot_in_time_is_overloaded_and_frees_nothing() -> None:
    """A rehearsal call finding no slot within its bound gets EngineOverloaded; counts unchanged."""
    pool = make_pool(count=1, limit=2, share=0.5)
    engine = pool.engines[0]
    held = await pool.acquire("rehearse", "m", b"r0")
    with pytest.raises(EngineOverloaded):
        await pool.acquire("rehearse", "m", b"r1", within=0.05)
    assert (engine.in_flight, engine.rehearse_in_flight) == (1, 1)
    pool.release(held, "rehearse")
    assert (engine.in_flight, engine.rehearse_in_flight, pool._waiting_work) == (0, 0, [])


async def test_a_call_takes_a_slot_per_choice_and_rehearsals_candidates_count_as_rehearsal() -> (
    None
):
    """vLLM batches each of a call's ``n`` choices: an acting call for K=4 candidates takes 4
    slots, 3 of them rehearsal's share; real work always keeps the slots outside the share."""
    pool = make_pool(count=1, limit=8, share=0.5)  # 8 slots, rehearsal's share 4
    engine = pool.engines[0]
    assert engine.slots_for("act", 4, candidates=3) == (4, 3)
    assert engine.slots_for("rehearse", 2) == (2, 2)
    assert engine.slots_for("act", 4) == (4, 0)  # a client's own n is all real work
    assert engine.slots_for("act", 20, candidates=19) == (8, 4)  # capped: always fits idle
    acting = await pool.acquire("act", "m", b"k", samples=4, candidates=3)
    assert (engine.in_flight, engine.rehearse_in_flight) == (4, 3)
    imagined = await pool.acquire("rehearse", "m", b"r")  # the share's last slot
    with pytest.raises(EngineOverloaded):  # another K=4 acting call would overrun the share
        await pool.acquire("act", "m", b"k2", samples=4, candidates=3, within=0.05)
    plain = [await pool.acquire("act", "m", b"p") for _ in range(3)]  # real work: the rest
    assert (engine.in_flight, engine.rehearse_in_flight) == (8, 4)
    pool.release(acting, "act", 4, 3)
    pool.release(imagined, "rehearse")
    for held in plain:
        pool.release(held, "act")
    assert (engine.in_flight, engine.rehearse_in_flight) == (0, 0)


async def test_rehearsal_leaves_a_waiting_multi_choice_call_all_the_slots_it_needs() -> None:
    """Real work waiting for 3 slots keeps a rehearsal call out while taking one would leave 2."""
    pool = make_pool(count=1, limit=4, share=1.0)
    engine = pool.engines[0]
    busy = [await pool.acquire("act", "m", b"a") for _ in range(2)]
    waiting = asyncio.create_task(pool.acquire("act", "m", b"w", samples=3))
    await asyncio.sleep(0.01)
    with pytest.raises(EngineOverloaded):
        await pool.acquire("rehearse", "m", b"r", within=0.05)
    pool.release(busy.pop(), "act")  # 3 free now: the waiting call's
    assert await asyncio.wait_for(waiting, 1) is engine
    assert engine.in_flight == 4


async def _held_imagination(pool: EnginePool, owner: object) -> tuple[asyncio.Task[bool], Engine]:
    """A task holding a rehearsal slot, registered as one real work may preempt; it returns
    whether it was preempted (and nothing else cancelled it)."""
    engine = await pool.acquire("rehearse", "m", b"r", owner=owner)

    async def imagine() -> bool:
        task = asyncio.current_task()
        assert task is not None
        engine.real.watch(task, owner)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            if engine.real.take_preempt(task):
                return True
            raise
        finally:
            pool.release(engine, "rehearse", owner=owner)
        return False  # pragma: no cover - the tests end it by cancelling it

    task = asyncio.create_task(imagine())
    await asyncio.sleep(0)
    return task, engine


async def test_real_work_preempts_others_imaginations_and_holds_them_back_until_done() -> None:
    """With yielding on, an acting call cancels the imaginations of other rehearsals on its
    engine and keeps new ones waiting until it is done; a rehearsal's own acting call does
    neither to its own imaginations."""
    pool = make_pool(count=1, limit=4)
    pool.rehearsal_yield, pool.rehearsal_yield_quiet_s, pool.queue_timeout = True, 0.5, 5.0
    mine, theirs = object(), object()
    kept, engine = await _held_imagination(pool, mine)
    own_turn = await pool.acquire("act", "m", b"a", owner=mine)
    await asyncio.sleep(0)
    assert not kept.done()  # its own acting call preempts nothing of its own
    assert await pool.acquire("rehearse", "m", b"r", owner=mine, within=0.05) is engine
    pool.release(engine, "rehearse", owner=mine)
    pool.release(own_turn, "act", owner=mine)  # its own ended work holds back nothing of its own
    assert await pool.acquire("rehearse", "m", b"r", owner=mine, within=0.05) is engine
    pool.release(engine, "rehearse", owner=mine)
    own_turn = await pool.acquire("act", "m", b"a", owner=mine)
    with pytest.raises(EngineOverloaded):  # another rehearsal waits while real work runs
        await pool.acquire("rehearse", "m", b"r", owner=theirs, within=0.05)
    waiting = asyncio.create_task(pool.acquire("rehearse", "m", b"r", owner=theirs, within=5))
    plain = await pool.acquire("act", "m", b"p")  # not a rehearsal's: preempts every one
    assert await kept  # preempted
    pool.release(own_turn, "act", owner=mine)
    await asyncio.sleep(0.02)
    assert not waiting.done()  # the plain request still runs
    pool.release(plain, "act")
    await asyncio.sleep(0.05)
    assert not waiting.done()  # the quiet period after real work has not passed yet
    assert await asyncio.wait_for(waiting, 2) is engine  # woken when it has
    pool.release(engine, "rehearse", owner=theirs)
    assert (engine.in_flight, engine.real.in_flight, engine.real.owned) == (0, 0, {})
    preempted = pool.metrics.registry.get_sample_value(
        "rehearsal_gateway_rehearsal_preemptions_total", {"engine": "e0"}
    )
    assert preempted == 1


async def test_without_yielding_real_work_leaves_imaginations_alone() -> None:
    pool = make_pool(count=1, limit=4)
    held, engine = await _held_imagination(pool, object())
    plain = await pool.acquire("act", "m", b"p")
    await asyncio.sleep(0)
    assert not held.done()
    assert engine.real.yielding
    held.cancel()  # not a preemption: the cancellation goes on
    with pytest.raises(asyncio.CancelledError):
        await held
    pool.release(plain, "act")
    assert engine.in_flight == 0


def split_pool(main: int, rehearsal: int, limit: int = 2, share: float = 0.5) -> EnginePool:
    """``main`` engines of real work and a rehearsal set of ``rehearsal`` engines."""
    own: frozenset[Role] = frozenset(("rehearse",))
    specs = [EngineSpec(url=f"http://m{i}:80/v1", name=f"m{i}", model="m") for i in range(main)]
    specs += [
        EngineSpec(url=f"http://r{i}:80/v1", name=f"r{i}", model="m", roles=own)
        for i in range(rehearsal)
    ]
    pool = EnginePool.from_specs(
        specs, GatewayMetrics(), default_concurrency=limit, aliases={}, queue_timeout=0.2,
        rehearsal_share=share,
    )  # fmt: skip
    for engine in pool.engines:
        pool.apply(engine, Probe(healthy=True))
    return pool


def test_rehearsal_engines_take_imagination_first_and_real_work_never() -> None:
    """With a rehearsal set, imaginations go to it whatever their key, one rehearsal's together;
    acting calls never do, and one engine of real work needs no key for a pass-through."""
    pool = split_pool(main=2, rehearsal=2)
    keys = [f"k{i}".encode() for i in range(40)]
    imagined = {pool.choose("rehearse", "m", key, frozenset()) for key in keys}
    acting = {pool.choose("act", "m", key, frozenset()) for key in keys}
    assert {engine.name for engine in imagined if engine} == {"r0", "r1"}
    assert {engine.name for engine in acting if engine} == {"m0", "m1"}
    assert len({pool.choose("rehearse", "m", b"one", frozenset()) for _ in range(5)}) == 1
    assert not split_pool(main=1, rehearsal=2).keyed


async def test_rehearsal_falls_back_to_the_main_set_within_its_share() -> None:
    """The rehearsal set full: imagination takes the main set's share, then waits for a slot of
    its own set; the rehearsal set down: the main set's share serves it."""
    pool = split_pool(main=1, rehearsal=1, limit=2, share=0.5)
    main, own = pool.engines
    held = [await pool.acquire("rehearse", "m", b"k") for _ in range(3)]
    assert held == [own, own, main]  # the rehearsal engine's 2 slots, then 1 of the main's 2
    waiting = asyncio.create_task(pool.acquire("rehearse", "m", b"k"))
    await asyncio.sleep(0.02)
    assert not waiting.done()  # the main engine's other slot is real work's
    assert await pool.acquire("act", "m", b"k", within=0.05) is main
    pool.release(held[0], "rehearse")
    assert await asyncio.wait_for(waiting, 1) is own
    pool.mark_unreachable(own)
    assert pool.choose("act", "m", b"k", frozenset()) is None  # main is full
    pool.release(main, "act")
    assert pool.choose("rehearse", "m", b"k", frozenset()) is None  # main's share is taken
    pool.release(held[2], "rehearse")
    assert pool.choose("rehearse", "m", b"k", frozenset()) is main


async def test_a_rehearsal_set_alone_is_not_ready() -> None:
    """``/ready`` needs an engine of real work: the rehearsal set alone answers no request."""
    pool = split_pool(main=1, rehearsal=1)
    main, _ = pool.engines
    assert (await EnginesReady(pool).check()).ok
    pool.mark_unreachable(main)
    result = await EnginesReady(pool).check()
    assert not result.ok
    assert result.detail == "1/2 healthy"
