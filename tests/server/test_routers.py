"""Engines behind the real vllm-router: one rehearsal and one session on one engine, and no loss.

The stack is two engine twins, the pinned ``vllm-router`` binary in front of them with the flags
the deploy files give it, and a gateway configured with ``--engine ROUTER,router=vllm-router``.
Where each call landed is read from the twins' own ``vllm:*`` metrics, never from the gateway.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from rehearsal_gateway.server.engines.client import call_headers
from rehearsal_gateway.server.engines.pool import Engine, EnginePool, affinity_key
from rehearsal_gateway.server.engines.routers import affinity_token
from rehearsal_gateway.server.settings import EngineSpec, GatewaySettings
from rehearsal_gateway.server.telemetry.metrics import GatewayMetrics
from rehearsal_gateway.twin.worlds import World, load_world
from tests.server.conftest import TWIN_MODEL, metric_value
from tests.server.rehearsal_support import assistant_turn, opening, rehearsal_of
from tests.support.procs import Proc
from tests.support.router import start_router

REHEARSE = {"mode": "parallel", "budget": 3, "commit": "reflect", "early_exit": False}


# --------------------------------------------------------------------------- without processes


def test_router_option_parses_and_rejects_unknown_kinds() -> None:
    """``router=vllm-router`` is an engine option; a router kind we do not speak is refused."""
    spec = EngineSpec.parse("http://router:30000/v1,router=vllm-router")
    assert spec.router == "vllm-router"
    settings = GatewaySettings(engines="http://r:1/v1,router=vllm-router http://e:2/v1")  # type: ignore[arg-type]
    assert [s.router for s in settings.engines] == ["vllm-router", None]
    with pytest.raises(ValueError, match="router"):
        EngineSpec.parse("http://router:30000/v1,router=llm-d")


def test_a_router_gets_the_affinity_header_a_plain_engine_does_not() -> None:
    """Calls to a router carry ``x-session-id``: the same opaque token for the same key."""
    router = Engine(EngineSpec.parse("http://r:1/v1,router=vllm-router"), 8)
    plain = Engine(EngineSpec.parse("http://e:2/v1"), 8)
    key = affinity_key("conversation-42", None, [])
    headers = call_headers(router, "act", key)
    assert headers["content-type"] == "application/json"
    assert headers["x-session-id"] == affinity_token(key)
    assert call_headers(router, "rehearse", key)["x-session-id"] == headers["x-session-id"]
    assert "conversation-42" not in headers["x-session-id"]  # opaque: routers log their keys
    other = call_headers(router, "act", affinity_key("other", None, []))
    assert other["x-session-id"] != headers["x-session-id"]
    assert "x-session-id" not in call_headers(plain, "act", key)
    assert (router.health_path, plain.health_path) == ("/readiness", "/health")


def test_a_router_has_no_gateway_side_concurrency_cap_unless_configured() -> None:
    """A router balances its fleet itself: only an explicit ``max_concurrency`` caps it."""
    specs = [
        EngineSpec.parse("http://r:1/v1,router=vllm-router,name=fleet"),
        EngineSpec.parse("http://r:2/v1,router=vllm-router,name=capped,max_concurrency=500"),
        EngineSpec.parse("http://e:3/v1,name=plain"),
    ]
    pool = EnginePool.from_specs(
        specs, GatewayMetrics(), default_concurrency=16, aliases={}, queue_timeout=1
    )
    limits = {engine.name: engine.max_concurrency for engine in pool.engines}
    assert limits["capped"] == 500
    assert limits["plain"] == 16
    assert limits["fleet"] > 10_000


# --------------------------------------------------------------------------- the real router


@dataclass
class RouterStack:
    twins: list[Proc]
    router: Proc
    gateway: Proc
    world: World = field(default_factory=lambda: load_world("retail"))

    clients: list[openai.OpenAI] = field(default_factory=list)  # closed with the stack

    def sdk(self) -> openai.OpenAI:
        client = openai.OpenAI(
            base_url=self.gateway.url + "/v1", api_key="unused", max_retries=0, timeout=60
        )
        self.clients.append(client)
        return client

    def served(self) -> list[float]:
        """Chat requests each twin has finished, from its own ``/metrics``."""
        return [_finished(twin.url) for twin in self.twins]


def _finished(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:e2e_request_latency_seconds_count")
    )


@pytest.fixture
def router_stack(
    tmp_path: Path, start_twin: Callable[..., Proc], start_gateway: Callable[..., Proc]
) -> Iterator[RouterStack]:
    twins = [start_twin("--world", "retail", "--latency", "h100", "--latency-scale", "0.02")
             for _ in range(2)]  # fmt: skip
    router = start_router([twin.url for twin in twins], tmp_path / "router.log")
    clients: list[openai.OpenAI] = []
    try:
        gateway = start_gateway(f"{router.url}/v1,router=vllm-router,name=fleet")
        yield RouterStack(twins, router, gateway, clients=clients)
    finally:
        for client in clients:
            client.close()
        router.stop()


def _turn(stack: RouterStack, messages: list[dict[str, Any]], session: str | None) -> Any:
    return stack.sdk().chat.completions.create(
        model=TWIN_MODEL,
        messages=messages,
        tools=stack.world.tool_schemas(),
        seed=7,
        extra_body={"rehearsal": REHEARSE},
        extra_headers={"X-Session-Id": session} if session else None,
    )


def _follow_up(stack: RouterStack, messages: list[dict[str, Any]], completion: Any) -> None:
    """Append the committed turn and a tool result for each of its calls (the client's part)."""
    messages.append(assistant_turn(completion))
    state = stack.world.new_state(stack.world.task_for(messages[1]["content"]))
    for call in completion.choices[0].message.tool_calls or []:
        try:
            arguments = json.loads(call.function.arguments)
        except ValueError:
            arguments = None
        result = stack.world.call(state, call.function.name, arguments)
        messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})


def test_one_rehearsal_and_one_session_land_on_one_engine(router_stack: RouterStack) -> None:
    """All calls of a rehearsal, and both turns of a session, hit one twin; sessions spread."""
    stack = router_stack
    homes: dict[str, set[int]] = {}
    calls_per_rehearsal: list[float] = []
    for i in range(12):
        # Half the sessions are named by X-Session-Id, half only by their opening messages.
        session = f"conversation-{i}" if i % 2 == 0 else None
        task = stack.world.tasks[i % len(stack.world.tasks)]
        messages = opening(stack.world, task)
        if session is None:
            messages[1] = {**messages[1], "content": f"{messages[1]['content']} (ticket {i})"}
        for _turn_index in range(2):
            before = stack.served()
            completion = _turn(stack, messages, session)
            after = stack.served()
            delta = [b - a for a, b in zip(before, after, strict=True)]
            assert rehearsal_of(completion)["degraded"] is None
            assert sum(delta) >= 3, delta  # the n=K acting call, imagined results, the commit
            assert min(delta) == 0, f"one rehearsal's calls were split across twins: {delta}"
            homes.setdefault(f"{session}/{i}", set()).add(delta.index(max(delta)))
            calls_per_rehearsal.append(sum(delta))
            if not completion.choices[0].message.tool_calls:
                break
            _follow_up(stack, messages, completion)
    assert all(len(twins) == 1 for twins in homes.values()), homes
    used = [sum(1 for twins in homes.values() if index in twins) for index in (0, 1)]
    assert min(used) >= 1, f"every session landed on one twin: {used}"
    print(f"\nrouter affinity: {len(calls_per_rehearsal)} rehearsals, "
          f"{sum(calls_per_rehearsal):.0f} engine calls, 100% of each rehearsal's calls on one "
          f"twin; {len(homes)} sessions split {used[0]}/{used[1]} across the twins")  # fmt: skip


@dataclass
class Tally:
    served: int = 0
    degraded: int = 0
    lost: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _client_loop(stack: RouterStack, worker: int, turns: int, tally: Tally) -> None:
    for turn in range(turns):
        task = stack.world.tasks[(worker + turn) % len(stack.world.tasks)]
        messages = opening(stack.world, task)
        try:
            completion = _turn(stack, messages, f"load-{worker}-{turn // 2}")
            degraded = rehearsal_of(completion)["degraded"] is not None
        except openai.APIError as exc:
            with tally.lock:
                tally.lost.append(f"{type(exc).__name__}: {exc}")
            continue
        with tally.lock:
            tally.served += 1
            tally.degraded += degraded


def test_a_twin_killed_mid_run_loses_nothing(router_stack: RouterStack) -> None:
    """SIGKILL one twin under load: every request is still answered, by the one left."""
    stack = router_stack
    tally = Tally()
    threads = [
        threading.Thread(target=_client_loop, args=(stack, worker, 10, tally))
        for worker in range(6)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while tally.served < 12 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert min(stack.served()) > 0, "both twins should carry sessions before the kill"
    stack.twins[1].kill()
    killed_at = tally.served
    survivor_before = _finished(stack.twins[0].url)
    for thread in threads:
        thread.join(timeout=90)
    assert not any(thread.is_alive() for thread in threads), "a client hung"
    assert tally.lost == [], tally.lost
    assert tally.served == 60
    assert _finished(stack.twins[0].url) > survivor_before
    retried = metric_value(stack.gateway.url, "rehearsal_gateway_engine_errors_total")
    print(f"\nrouter failover: {tally.served} served ({tally.served - killed_at} after the kill), "
          f"{tally.degraded} degraded, {len(tally.lost)} lost; {retried:.0f} engine call(s) "
          f"failed at the router and were retried through it")  # fmt: skip


def test_a_failure_the_router_passes_on_is_retried_through_it(
    tmp_path: Path,
    start_twin: Callable[..., Proc],
    start_double: Callable[..., Proc],
    start_gateway: Callable[..., Proc],
) -> None:
    """A router that gives up (no retries of its own) on a failing engine: the gateway retries."""
    twin = start_twin("--world", "retail")
    failing = start_double("status:500", model=TWIN_MODEL)
    router = start_router(
        [twin.url, failing.url], tmp_path / "router.log", extra=("--disable-retries",)
    )
    try:
        gateway = start_gateway(f"{router.url}/v1,router=vllm-router,name=fleet")
        statuses = []
        for i in range(12):
            response = httpx.post(
                gateway.url + "/v1/chat/completions",
                json={"model": TWIN_MODEL, "messages": [{"role": "user", "content": f"hi {i}"}]},
                headers={"X-Session-Id": f"s-{i}"},
                timeout=30,
            )
            statuses.append(response.status_code)
        failed = metric_value(gateway.url, "rehearsal_gateway_engine_errors_total", engine="fleet")
    finally:
        router.stop()
    assert statuses == [200] * 12
    assert failed >= 1, "no session hashed to the failing engine: nothing was retried"
