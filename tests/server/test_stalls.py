"""The stall watch without HTTP: when a canary goes out, what an answer or silence does.

The pool's and the watch's decisions driven directly (``look``, ``apply``) with a canary of our
own; the same behaviour over real sockets, against an engine that swallows calls behind a
passing ``/health``, is in tests/server/test_faults.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import orjson
import pytest

from rehearsal_gateway.server.engines.engine import generated_tokens
from rehearsal_gateway.server.engines.pool import Engine, EnginePool, Probe
from rehearsal_gateway.server.engines.stalls import StallWatch
from rehearsal_gateway.server.settings import EngineSpec
from rehearsal_gateway.server.telemetry.metrics import GatewayMetrics
from rehearsal_gateway.twin.worlds import load_world
from tests.server.conftest import TWIN_MODEL, metric_value
from tests.server.rehearsal_support import opening
from tests.server.test_faults import CLIENT_TIMEOUT_S, SENT, check, classify_stream, drive
from tests.support.chaos import ChaosProxy
from tests.support.procs import Proc
from tests.support.vllm import SERVED_MODEL_NAME

AFTER_S = 0.05


def make_pool(*specs: EngineSpec) -> EnginePool:
    pool = EnginePool.from_specs(
        specs or [EngineSpec(url="http://e0:80/v1", name="e0", model="m")],
        GatewayMetrics(), default_concurrency=4, aliases={}, queue_timeout=0.2,
    )  # fmt: skip
    for engine in pool.engines:
        pool.apply(engine, Probe(healthy=True))
    return pool


def sample(pool: EnginePool, family: str, **labels: str) -> float:
    value = pool.metrics.registry.get_sample_value(f"rehearsal_gateway_{family}_total", labels)
    return value or 0.0


class Canaries:
    """A canary that answers, or stays silent, as the test says; it counts the calls."""

    def __init__(self, answer: bool | None) -> None:
        self.answer = answer  # None: never answers
        self.sent: list[str] = []
        self.called = asyncio.Event()

    async def __call__(self, engine: Engine) -> bool:
        self.sent.append(engine.name)
        self.called.set()
        if self.answer is None:
            await asyncio.Event().wait()
        return bool(self.answer)


async def waiting_call(engine: Engine, outcome: list[str]) -> asyncio.Task[None]:
    """A task waiting on ``engine``'s bytes, as an engine call does; records how it ended."""
    started = asyncio.Event()

    async def call() -> None:
        task = engine.watch()
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            outcome.append("aborted" if engine.take_abort(task) else "cancelled")
        finally:
            engine.unwatch(task)

    task = asyncio.create_task(call())
    await started.wait()
    return task


def make_watch(pool: EnginePool, canary: Callable[[Engine], Awaitable[bool]]) -> StallWatch:
    return StallWatch(pool, canary, after_s=AFTER_S, timeout_s=0.1, retry_s=0.0)


async def test_an_answered_canary_keeps_a_long_call_waiting() -> None:
    """A call past ``after_s`` on a silent engine: one canary; an answer leaves the call be."""
    pool = make_pool()
    (engine,) = pool.engines
    canaries = Canaries(answer=True)
    watch = make_watch(pool, canaries)
    outcome: list[str] = []
    task = await waiting_call(engine, outcome)
    await asyncio.sleep(AFTER_S * 2)
    checks = watch.look(time.monotonic())
    assert watch.look(time.monotonic()) == []  # one canary in flight per engine
    await asyncio.gather(*checks)
    assert canaries.sent == ["e0"]
    assert engine.healthy
    assert not engine.stalled
    assert not task.done()
    assert outcome == []
    assert sample(pool, "engine_canaries", engine="e0", outcome="answered") == 1
    watch.look(time.monotonic())  # it just answered: no canary until after_s of silence again
    assert canaries.sent == ["e0"]
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_silent_canary_takes_the_engine_out_and_aborts_its_calls() -> None:
    """No answer within the canary's bound: the engine is out and its waiting calls are moved."""
    pool = make_pool()
    (engine,) = pool.engines
    watch = make_watch(pool, Canaries(answer=None))
    outcome: list[str] = []
    task = await waiting_call(engine, outcome)
    await asyncio.sleep(AFTER_S * 2)
    await asyncio.gather(*watch.look(time.monotonic()))
    await asyncio.wait_for(task, 5)
    assert outcome == ["aborted"]
    assert engine.stalled
    assert not engine.healthy
    assert sample(pool, "engine_ejections", engine="e0", cause="canary") == 1
    assert sample(pool, "engine_canaries", engine="e0", outcome="silent") == 1


async def test_a_stalled_engine_comes_back_only_when_a_canary_is_answered() -> None:
    """Passing probes do not bring a stalled engine back; an answered canary does."""
    pool = make_pool()
    (engine,) = pool.engines
    canaries = Canaries(answer=None)
    watch = make_watch(pool, canaries)
    outcome: list[str] = []
    await waiting_call(engine, outcome)
    await asyncio.sleep(AFTER_S * 2)
    await asyncio.gather(*watch.look(time.monotonic()))
    assert engine.stalled
    pool.apply(engine, Probe(healthy=True))
    assert not engine.healthy  # /health passes, but calls went unanswered
    canaries.answer = True
    # retry_s 0: a canary at once, as the probes pass
    await asyncio.gather(*watch.look(time.monotonic()))
    assert engine.healthy
    assert not engine.stalled
    assert canaries.sent == ["e0", "e0"]


async def test_a_stalled_engine_whose_probes_fail_gets_no_canary() -> None:
    """A stalled engine gets canaries only while its probes pass; they bring it back after."""
    pool = make_pool()
    (engine,) = pool.engines
    canaries = Canaries(answer=None)
    watch = make_watch(pool, canaries)
    await waiting_call(engine, [])
    await asyncio.sleep(AFTER_S * 2)
    await asyncio.gather(*watch.look(time.monotonic()))
    pool.apply(engine, Probe(healthy=False))
    watch.look(time.monotonic())
    assert canaries.sent == ["e0"]
    canaries.answer = True
    pool.apply(engine, Probe(healthy=True))
    await asyncio.gather(*watch.look(time.monotonic()))
    assert engine.healthy


async def test_traffic_while_the_canary_waits_keeps_the_engine_in() -> None:
    """The canary waits in the engine's queue, but another call came back meanwhile: alive."""
    pool = make_pool()
    (engine,) = pool.engines
    watch = make_watch(pool, Canaries(answer=None))
    outcome: list[str] = []
    task = await waiting_call(engine, outcome)
    await asyncio.sleep(AFTER_S * 2)
    checks = watch.look(time.monotonic())
    await asyncio.sleep(0.01)
    engine.progressed()  # an answer of another call
    await asyncio.gather(*checks)
    assert engine.healthy
    assert outcome == []
    assert sample(pool, "engine_canaries", engine="e0", outcome="answered") == 1
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


@pytest.mark.parametrize(
    "setup",
    [
        pytest.param("no_call", id="nothing-waits"),
        pytest.param("recent_answer", id="answered-lately"),
        pytest.param("router", id="router"),
        pytest.param("unhealthy", id="already-out"),
    ],
)
async def test_no_canary_when_none_is_needed(setup: str) -> None:
    """Nothing waits, the engine answered within ``after_s``, a router, or already out."""
    router = setup == "router"
    spec = EngineSpec(url="http://e0:80/v1", name="e0", model="m",
                      router="vllm-router" if router else None)  # fmt: skip
    pool = make_pool(spec)
    (engine,) = pool.engines
    canaries = Canaries(answer=True)
    watch = make_watch(pool, canaries)
    task = None if setup == "no_call" else await waiting_call(engine, [])
    await asyncio.sleep(AFTER_S * 2)
    if setup == "recent_answer":
        engine.progressed()
    if setup == "unhealthy":
        pool.mark_unreachable(engine)
    watch.look(time.monotonic())
    assert canaries.sent == []
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_rising_generation_tokens_count_as_progress() -> None:
    """The engine's own counter rising between probes shows it generating: no canary."""
    pool = make_pool()
    (engine,) = pool.engines
    canaries = Canaries(answer=True)
    watch = make_watch(pool, canaries)
    task = await waiting_call(engine, [])
    pool.apply(engine, Probe(healthy=True, generated=100.0))
    await asyncio.sleep(AFTER_S * 2)
    pool.apply(engine, Probe(healthy=True, generated=100.0))  # unchanged: no sign of life
    await asyncio.gather(*watch.look(time.monotonic()))
    assert canaries.sent == ["e0"]
    await asyncio.sleep(AFTER_S * 2)
    pool.apply(engine, Probe(healthy=True, generated=164.0))
    watch.look(time.monotonic())
    assert canaries.sent == ["e0"]  # generating: nothing to ask
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_the_watch_runs_and_stops_with_its_canaries() -> None:
    """``run`` looks on its own; cancelling it cancels the canary in flight."""
    pool = make_pool()
    (engine,) = pool.engines
    canaries = Canaries(answer=None)
    watch = StallWatch(pool, canaries, after_s=AFTER_S, timeout_s=60, retry_s=60)
    task = await waiting_call(engine, [])
    running = asyncio.create_task(watch.run())
    await canaries.called.wait()
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    assert not watch.in_flight
    assert engine.healthy  # cut by the shutdown, not judged
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_generation_tokens_are_read_from_the_exposition() -> None:
    """The counter's samples summed; its ``_created`` twin and other families ignored."""
    exposition = (
        "# TYPE vllm:generation_tokens counter\n"
        'vllm:generation_tokens_total{model_name="a"} 120.0\n'
        'vllm:generation_tokens_total{model_name="b"} 3.0\n'
        'vllm:generation_tokens_created{model_name="a"} 1.7e9\n'
        'vllm:request_generation_tokens_sum{model_name="a"} 99.0\n'
    )
    assert generated_tokens(exposition) == 123.0
    assert generated_tokens("vllm:num_requests_waiting 0\n") is None


# ---- over real sockets: an engine that swallows every call behind a passing /health

# Only a canary can answer a waiting call before the client gives up (CLIENT_TIMEOUT_S): every
# other bound the gateway has is longer. Probes get 2 s, so that a loaded host does not time
# them out and take the wedged engine out by its probes before a canary could.
STALLS = {
    "RGW_ENGINE_STALL_AFTER_S": "1",
    "RGW_ENGINE_CANARY_TIMEOUT_S": "3",
    "RGW_FIRST_BYTE_TIMEOUT": "60",
    "RGW_REQUEST_TIMEOUT": "600",
    "RGW_HEALTH_TIMEOUT": "2",
}
WEDGED = "wedged"  # fixed names: the sessions' rendezvous ranking is the same on every run


def judged_canaries(gateway_url: str, bound_s: float = 30.0) -> tuple[float, float]:
    """Canaries answered and silent, once at least one has been judged (or ``bound_s`` passed).

    A canary sent while an answer was generated may be judged just after the answer reached
    the client (its own answer rides the same batch, and the event loop serves both), so the
    count is read until it shows one; the bound is against a canary never sent, not a speed test.
    """
    name = "rehearsal_gateway_engine_canaries_total"
    deadline = time.monotonic() + bound_s
    while True:
        answered = metric_value(gateway_url, name, outcome="answered")
        silent = metric_value(gateway_url, name, outcome="silent")
        if answered + silent >= 1 or time.monotonic() >= deadline:
            return answered, silent
        time.sleep(0.2)


def ejected_by_canary(gateway_url: str) -> float:
    return metric_value(gateway_url, "rehearsal_gateway_engine_ejections_total", cause="canary")


@pytest.fixture
def wedged(start_twin) -> Iterator[ChaosProxy]:  # type: ignore[no-untyped-def]
    """A twin behind a proxy that answers its probes and swallows every other call."""
    proxy = ChaosProxy(upstream_port=start_twin("--seed", "1").port).start()
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.mark.parametrize("beside", [True, False], ids=["beside-healthy", "alone"])
def test_calls_on_an_engine_that_swallows_them_move_or_get_a_504(
    wedged: ChaosProxy, start_twin, start_gateway, beside: bool
) -> None:
    """Whole answers and streams waiting on the wedged engine: each moves to the healthy engine,
    or, alone, gets a clear error; none waits for RGW_REQUEST_TIMEOUT."""
    engines = [f"{wedged.url}/v1,name={WEDGED}"]
    if beside:
        engines.append(start_twin("--seed", "1").url + "/v1,name=healthy")
    gateway = start_gateway(*engines, env=STALLS)
    wedged.set("swallow")
    tally = drive(gateway.url)
    check(f"{'beside' if beside else 'alone'}/swallow", tally, answered=SENT if beside else 0)
    assert set(tally.errors) <= {"504:engine_timeout", "503:engine_unavailable"}, tally.errors
    assert ejected_by_canary(gateway.url) == 1


def test_a_rehearsal_on_an_engine_that_swallows_calls_moves(
    wedged: ChaosProxy, start_twin, start_gateway
) -> None:
    """Parallel rehearsals whose acting and imagined calls wait on the wedged engine: they move
    to the healthy one and every request is answered, long before its 60 s deadline."""
    healthy = start_twin("--seed", "1")
    gateway = start_gateway(
        f"{wedged.url}/v1,name={WEDGED}", healthy.url + "/v1,name=healthy", env=STALLS
    )
    wedged.set("swallow")
    world = load_world("retail")

    def one(i: int) -> tuple[str, str]:
        body = {
            "model": TWIN_MODEL, "messages": opening(world, world.tasks[i]),
            "tools": world.tool_schemas(), "stream": i % 2 == 1,
            "rehearsal": {"mode": "parallel", "budget": 2, "deadline_ms": 60_000},
        }  # fmt: skip
        headers = {"x-session-id": f"s{i}"}
        url = gateway.url + "/v1/chat/completions"
        try:
            response = httpx.post(url, json=body, headers=headers, timeout=CLIENT_TIMEOUT_S)
        except httpx.TimeoutException:
            return "hung", "client timeout"
        if response.status_code != 200:
            return "error", str(response.status_code)
        if i % 2 == 1:
            return classify_stream(response.content)
        return ("answered", "ok") if response.json().get("choices") else ("lost", "no choices")

    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(one, range(4)))
    assert outcomes == [("answered", "ok")] * 4
    assert ejected_by_canary(gateway.url) == 1


def test_a_long_generation_on_a_healthy_engine_is_not_cut(
    start_twin, start_gateway, tmp_path: Path
) -> None:
    """A whole answer that takes many canary periods: the engine answers each canary, the call
    is answered in full, and no engine is taken out."""
    profile = tmp_path / "slow-decode.json"
    profile.write_text(orjson.dumps({"decode_step_s": 0.15}).decode())  # 40 tokens: 6 s
    twin = start_twin("--seed", "1", "--latency", str(profile))
    gateway = start_gateway(twin.url + "/v1", env={**STALLS, "RGW_ENGINE_STALL_AFTER_S": "0.5"})
    body = {
        "model": TWIN_MODEL, "max_tokens": 40,
        "messages": [{"role": "user", "content": "Tell me a long story."}],
    }  # fmt: skip
    response = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=CLIENT_TIMEOUT_S)
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["usage"]["completion_tokens"] == 40
    assert data["choices"][0]["finish_reason"] == "length"
    answered, silent = judged_canaries(gateway.url)
    assert answered >= 1  # canaries went out while it generated, and were answered
    assert silent == 0
    assert ejected_by_canary(gateway.url) == 0


@pytest.mark.vllm
@pytest.mark.timeout(300)
def test_a_long_generation_on_real_vllm_is_not_cut(vllm_engine: Proc, start_gateway) -> None:
    """Real vLLM: canaries go out while a 600-token whole answer is generated; vLLM answers
    them from the same batch, and the call is answered in full with no engine taken out."""
    # Probes rarely, so that the generation counter cannot stand in for the canaries here.
    env = {**STALLS, "RGW_ENGINE_STALL_AFTER_S": "0.3", "RGW_HEALTH_INTERVAL": "60"}
    gateway = start_gateway(vllm_engine.url + "/v1", env=env)
    body = {
        "model": SERVED_MODEL_NAME, "max_tokens": 600, "ignore_eos": True, "temperature": 0,
        "messages": [{"role": "user", "content": "Count to a thousand."}],
    }  # fmt: skip
    response = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=240)
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] == 600
    answered, silent = judged_canaries(gateway.url)
    assert answered >= 1, "no canary was judged while the answer was generated"
    assert silent == 0
    assert ejected_by_canary(gateway.url) == 0
