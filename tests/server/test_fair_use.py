"""Fair use per key: token buckets and leases on real Redis and in process, 429s end to end,
and limits that fail open when Redis is stopped or slowed."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
import redis

from rehearsal_gateway.server.http.auth import key_digest, tenant_of
from rehearsal_gateway.server.store.backends import RedisStore
from rehearsal_gateway.server.store.limits import (
    InProcessLimitCounters,
    LimitCounters,
    RedisLimitCounters,
)
from tests.server.conftest import TWIN_MODEL
from tests.support.procs import free_port
from tests.support.redis_servers import start_redis

REDIS_URL = "redis://127.0.0.1:6379/0"
KEY_A, KEY_B = "sk-fair-a-0123456789", "sk-fair-b-0123456789"
ORDER_ID = {"type": "object", "properties": {"order_id": {"type": "string"}}}
TOOLS = [{"type": "function", "function": {"name": "get_order", "parameters": ORDER_ID}}]


@pytest.fixture(params=["redis", "in-process"])
async def counters(request: pytest.FixtureRequest) -> AsyncIterator[LimitCounters]:
    if request.param == "in-process":
        yield InProcessLimitCounters()
        return
    store = RedisStore(REDIS_URL)
    yield RedisLimitCounters(store)
    await store.close()


async def test_bucket_takes_its_burst_then_says_when_to_retry(counters: LimitCounters) -> None:
    """Capacity 3 at 2/s: three takes pass, the fourth waits ~0.5 s, a debt makes it longer."""
    key = f"rgwtest-bucket-{uuid.uuid4().hex}"
    assert [await counters.take(key, 3, 2.0, 1) for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = await counters.take(key, 3, 2.0, 1)
    assert 0.3 < wait <= 0.5
    await asyncio.sleep(wait + 0.05)
    assert await counters.take(key, 3, 2.0, 1) == 0.0
    assert await counters.take(key, 3, 2.0, 0) > 0  # a check (cost 0) is refused alike
    assert await counters.take(key, 3, 2.0, 4, force=True) == 0.0  # charged after the fact
    assert await counters.take(key, 3, 2.0, 1) > 2.0  # in debt: ~4 tokens to refill


async def test_leases_cap_in_flight_and_free_on_leave_or_expiry(counters: LimitCounters) -> None:
    """Two leases at most; leaving frees one at once, a dead holder's frees after its lease."""
    key = f"rgwtest-inflight-{uuid.uuid4().hex}"
    assert await counters.enter(key, "a", 2, 60) == 0.0
    assert await counters.enter(key, "b", 2, 0.3) == 0.0
    assert await counters.enter(key, "c", 2, 60) > 0
    await counters.leave(key, "a")
    assert await counters.enter(key, "c", 2, 60) == 0.0
    assert 0 < await counters.enter(key, "d", 2, 60) <= 0.3
    await asyncio.sleep(0.35)  # "b" never left (its replica died): its lease ran out
    assert await counters.enter(key, "d", 2, 60) == 0.0
    await counters.leave(key, "nobody")  # leaving twice or unknown ids is harmless


def _env(store: str, **limits: Any) -> dict[str, str]:
    env = {f"RGW_LIMIT_{name.upper()}": str(value) for name, value in limits.items()}
    env["RGW_API_KEYS"] = f"{KEY_A},{KEY_B}"
    if store == "redis":
        env["RGW_REDIS_URL"] = REDIS_URL
        env["RGW_REDIS_PREFIX"] = f"rgwtest-{uuid.uuid4().hex[:8]}:"
    return env


def _chat(url: str, key: str, **extra: Any) -> httpx.Response:
    body = {"model": TWIN_MODEL, "messages": [{"role": "user", "content": "Where is W1001?"}],
            "max_tokens": 16, **extra}  # fmt: skip
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=30)


def _limited(url: str, limit: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith(f'rehearsal_gateway_rate_limited_total{{limit="{limit}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize("store", ["redis", "in-process"])
def test_rate_limit_is_a_429_envelope_with_retry_after_and_overrides_hold(
    start_twin, start_gateway, store: str
) -> None:
    """Key B gets its burst of 2, then 429s; key A's override lets it through; the SDK sees a
    RateLimitError."""
    twin = start_twin("--seed", "1")
    overrides = {tenant_of(key_digest(KEY_A)): {"rps": 100, "burst": 100}}
    # One token every 50 s: however slow the host, no token comes back within the test.
    env = _env(store, rps=0.02, burst=2)
    env["RGW_LIMIT_OVERRIDES"] = orjson.dumps(overrides).decode()
    gateway = start_gateway(twin.url + "/v1", env=env)
    statuses = [_chat(gateway.url, KEY_B).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    refused = _chat(gateway.url, KEY_B)
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["retry-after"]) <= 50
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")
    assert "0.02 requests/s" in error["message"]
    assert [_chat(gateway.url, KEY_A).status_code for _ in range(6)] == [200] * 6
    with (
        openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=KEY_B, max_retries=0) as client,
        pytest.raises(openai.RateLimitError),
    ):
        client.chat.completions.create(
            model=TWIN_MODEL, messages=[{"role": "user", "content": "x"}]
        )
    assert _limited(gateway.url, "rate") >= 3
    assert httpx.get(f"{gateway.url}/health", timeout=5).status_code == 200  # probes unlimited


def test_concurrency_limit_refuses_beyond_n_in_flight_and_frees_leases(
    start_double, start_gateway
) -> None:
    """Concurrency 2 and two streams held open: every further request is a 429; once they are
    closed, the key holds no lease and is served again."""
    engine = start_double("slow", model=TWIN_MODEL)  # a stream that lasts minutes
    env = _env("redis", concurrency=2)
    gateway = start_gateway(engine.url + "/v1", env=env)
    body = {"model": TWIN_MODEL, "messages": [{"role": "user", "content": "x"}], "stream": True}
    headers = {"Authorization": f"Bearer {KEY_B}"}
    key = f"{env['RGW_REDIS_PREFIX']}limit:{{{tenant_of(key_digest(KEY_B))}}}:inflight"
    url = f"{gateway.url}/v1/chat/completions"
    with httpx.Client(timeout=30) as client, contextlib.ExitStack() as streams:
        readers = []  # kept: a dropped reader closes its stream
        for _ in range(2):  # in flight for as long as they are open, however slow the host
            held = streams.enter_context(client.stream("POST", url, json=body, headers=headers))
            assert held.status_code == 200
            readers.append(held.iter_raw())
            assert next(readers[-1]).startswith(b"data: ")
        assert [_chat(gateway.url, KEY_B).status_code for _ in range(3)] == [429] * 3
    with redis.Redis.from_url(REDIS_URL) as raw:
        deadline = time.monotonic() + 30  # a lease is left once the closed streams are noticed
        while raw.zcard(key) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert raw.zcard(key) == 0
        assert raw.ttl(key) in (-2, *range(1, 901))  # gone, or expiring
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", url, json=body, headers=headers) as again,
    ):
        assert again.status_code == 200


def test_rehearsal_engine_calls_and_cost_caps(start_twin, start_gateway) -> None:
    """3 engine calls a minute: rehearsals are admitted until they have spent them, then 429
    while pass-through still answers; budget x depth over the key's cap is a 400 naming it."""
    twin = start_twin("--seed", "1", "--world", "retail")
    env = _env("redis", engine_calls_per_min=3, max_cost=4)
    gateway = start_gateway(twin.url + "/v1", env=env)
    knobs = {"tools": TOOLS, "temperature": 0.7}
    deep = {"mode": "sequential", "budget": 4, "depth": 2}
    over = _chat(gateway.url, KEY_B, **knobs, rehearsal=deep)
    assert over.status_code == 400
    assert over.json()["error"]["param"] == "rehearsal.budget"
    spent, answers = 0, []
    for _ in range(8):  # each costs >= 1 call; its charge runs beside the answer
        answer = _chat(gateway.url, KEY_B, **knobs, rehearsal={"mode": "parallel", "budget": 4})
        answers.append(answer)
        if answer.status_code != 200:
            break
        spent += answer.json()["rehearsal"]["engine_calls"]
    refused = answers[-1]
    assert refused.status_code == 429, [a.status_code for a in answers]
    assert spent >= 2  # refused only once the bucket (3, ~0.05/s refill) was spent
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert "3 engine calls/min" in refused.json()["error"]["message"]
    assert int(refused.headers["retry-after"]) >= 1
    assert _chat(gateway.url, KEY_B, **knobs).status_code == 200  # pass-through is not rehearsal
    other = _chat(gateway.url, KEY_A, **knobs, rehearsal={"mode": "parallel", "budget": 2})
    assert other.status_code == 200  # another key has its own bucket
    assert _limited(gateway.url, "engine_calls") == 1
    assert _limited(gateway.url, "budget_depth") == 1


@pytest.mark.parametrize("fault", ["stopped", "slowed"])
def test_limits_fail_open_when_redis_is_stopped_or_slowed(
    start_twin, start_gateway, tmp_path: Path, fault: str
) -> None:
    """Redis killed or SIGSTOPped: every request is still answered (no 500, no hang), the limit
    is skipped and counted; Redis back: the limit holds again."""
    proc = start_redis(tmp_path / "redis", free_port())
    twin = start_twin("--seed", "1")
    # One token every 20 s: the refusals below cannot be refilled away by a slow host.
    env = _env("redis", rps=0.05, burst=1, fail_open_s=0.5)
    env["RGW_REDIS_URL"] = f"redis://127.0.0.1:{proc.port}/0"
    gateway = start_gateway(twin.url + "/v1", env=env)
    try:
        assert [_chat(gateway.url, KEY_B).status_code for _ in range(2)] == [200, 429]
        if fault == "stopped":
            proc.kill()
        else:
            proc.popen.send_signal(signal.SIGSTOP)
        # Each answered within the client's timeout: the check is bounded, then skipped.
        statuses = [_chat(gateway.url, KEY_B).status_code for _ in range(6)]
        assert statuses == [200] * 6
        text = httpx.get(f"{gateway.url}/metrics", timeout=5).text
        assert "rehearsal_gateway_limits_failed_open_total 0.0" not in text
    finally:
        if fault == "slowed":
            proc.popen.send_signal(signal.SIGCONT)
    if fault == "slowed":
        time.sleep(0.6)  # past the fail-open window
        statuses = [_chat(gateway.url, KEY_B).status_code for _ in range(3)]
        assert 429 in statuses
    proc.stop()
