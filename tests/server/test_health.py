"""Health that does not lie, without HTTP: thresholds, traffic as liveness, hung-call aborts.

The pool's decisions driven directly (``apply``, ``record_failure``, ``check``), and the stream
framing that keeps half an event from reaching a client; the same behaviour over real sockets
is tests/server/test_faults.py and test_saturation.py.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from rehearsal_gateway.server.engines.pool import Engine, EnginePool, Probe
from rehearsal_gateway.server.engines.streams import split_events
from rehearsal_gateway.server.settings import EngineSpec
from rehearsal_gateway.server.telemetry.metrics import GatewayMetrics

EJECTIONS = "rehearsal_gateway_engine_ejections_total"


def make_pool(health_failures: int = 2, eject_after: int = 3) -> tuple[EnginePool, Engine]:
    pool = EnginePool.from_specs(
        [EngineSpec(url="http://e0:80/v1", name="e0", model="m")],
        GatewayMetrics(), default_concurrency=4, aliases={}, queue_timeout=0.2,
        eject_after=eject_after, health_failures=health_failures,
    )  # fmt: skip
    (engine,) = pool.engines
    pool.apply(engine, Probe(healthy=True))
    return pool, engine


def ejections(pool: EnginePool, cause: str) -> float:
    value = pool.metrics.registry.get_sample_value(EJECTIONS, {"engine": "e0", "cause": cause})
    return value or 0.0


def test_one_failed_probe_is_not_enough() -> None:
    """``health_failures`` failed probes in a row take the engine out; a pass resets the count."""
    pool, engine = make_pool(health_failures=2)
    pool.apply(engine, Probe(healthy=False))
    assert engine.healthy
    pool.apply(engine, Probe(healthy=True))
    pool.apply(engine, Probe(healthy=False))
    assert engine.healthy  # the streak was reset by the pass
    pool.apply(engine, Probe(healthy=False))
    assert not engine.healthy
    assert ejections(pool, "probes") == 1
    pool.apply(engine, Probe(healthy=True))
    assert engine.healthy


def test_a_timed_out_probe_is_excused_by_traffic() -> None:
    """Busy, not dead: a probe that timed out while traffic came back does not count."""
    pool, engine = make_pool(health_failures=1)
    since = time.monotonic()
    engine.progressed()  # an answer arrived after the previous probe round started
    pool.apply(engine, Probe(healthy=False, timed_out=True), since)
    assert engine.healthy
    # A refusal is not excused, traffic or not; neither is a timeout with no traffic since.
    pool.apply(engine, Probe(healthy=False), since)
    assert not engine.healthy
    assert not engine.hung  # it answered: not hung, just failing its probes


async def test_a_silent_engine_is_hung_and_its_waiting_calls_are_aborted() -> None:
    """Probes time out and nothing came back: the calls waiting on the engine are cancelled."""
    pool, engine = make_pool(health_failures=1)
    waiting = asyncio.Event()
    outcome: list[str] = []

    async def call() -> None:
        task = engine.watch()
        try:
            waiting.set()
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            outcome.append("aborted" if engine.take_abort(task) else "cancelled")
        finally:
            engine.unwatch(task)

    task = asyncio.create_task(call())
    await waiting.wait()
    await pool.check([engine], _timed_out)  # no traffic since the start: hung
    await asyncio.wait_for(task, 5)
    assert outcome == ["aborted"]
    assert engine.hung
    assert not engine.healthy
    assert not engine.waiters


async def test_an_abort_does_not_swallow_another_cancellation() -> None:
    """Aborted and cancelled by someone else (the client left): the cancellation goes on."""
    _, engine = make_pool()
    started = asyncio.Event()
    seen: list[bool] = []

    async def call() -> None:
        task = engine.watch()
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append(engine.take_abort(task))
            raise

    task = asyncio.create_task(call())
    await started.wait()
    engine.abort_calls()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == [False]


def test_passive_ejection_needs_consecutive_failures() -> None:
    """``eject_after`` failed calls in a row take the engine out; an answer in between resets."""
    pool, engine = make_pool(eject_after=3)
    for _ in range(2):
        pool.record_failure(engine)
    engine.progressed()
    pool.record_failure(engine)
    pool.record_failure(engine)
    assert engine.healthy
    pool.record_failure(engine)
    assert not engine.healthy
    assert ejections(pool, "calls") == 1


@pytest.mark.parametrize(
    ("data", "whole", "tail"),
    [
        (b"data: a\n\ndata: b\n\n", b"data: a\n\ndata: b\n\n", b""),
        (b'data: a\n\ndata: {"id":"chatcmpl', b"data: a\n\n", b'data: {"id":"chatcmpl'),
        (b'data: {"id"', b"", b'data: {"id"'),
    ],
)
def test_split_events_never_hands_over_half_an_event(
    data: bytes, whole: bytes, tail: bytes
) -> None:
    """Whole events go on; the unfinished one waits for its end (or is dropped at a cut)."""
    assert split_events(data) == (whole, tail)


async def _timed_out(engine: Engine) -> Probe:
    return Probe(healthy=False, timed_out=True)
