"""Rehearsal when things go wrong: engines failing or hanging, Redis stopping, clients leaving.

Also the two properties that need a second engine or API keys: grounding reaches the next
rehearsal's prompt, and tenants never see each other's grounding or traces.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rehearsal_gateway.twin.worlds import load_world
from tests.server.conftest import TWIN_MODEL, metric_value
from tests.server.rehearsal_support import (
    assistant_turn,
    chat,
    drop_prefix,
    opening,
    rehearsal_of,
    run_committed,
)
from tests.server.test_disconnect import wait_for_running
from tests.support.procs import free_port

WORLD = load_world("retail")
KNOBS = {"mode": "parallel", "budget": 2, "commit": "select", "early_exit": False}


@pytest.fixture
def prefix() -> Iterator[str]:
    """A Redis key prefix of this test's own, dropped afterwards."""
    value = f"rgwtest-{uuid.uuid4().hex[:8]}:"
    yield value
    drop_prefix(value)


def _tool_message(call_id: str, result: object) -> dict[str, str]:
    return {"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)}


def _answered_first_turn(client: Any) -> tuple[Any, list[dict[str, Any]]]:
    """Commit the first turn of task 0, run it on the world: (completion, conversation + result)."""
    task = WORLD.tasks[0]
    messages = opening(WORLD, task)
    first = chat(client, WORLD, messages, seed=1, **KNOBS)
    ((call_id, result),) = run_committed(WORLD, WORLD.new_state(task), first)
    return first, [*messages, assistant_turn(first), _tool_message(call_id, result)]


@pytest.fixture
def two_tenants(start_twin, start_gateway, prefix: str) -> str:  # type: ignore[no-untyped-def]
    """A gateway on Redis with two API keys (two tenants); its URL."""
    env = {"RGW_REDIS_URL": "redis://127.0.0.1:6379/0", "RGW_REDIS_PREFIX": prefix,
           "RGW_API_KEYS": "key-one,key-two"}  # fmt: skip
    twin = start_twin("--world", "retail", "--seed", "2", "--skill", "1.0")
    url: str = start_gateway(twin.url + "/v1", env=env).url
    return url


_CLIENTS: list[Any] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    """An unclosed client's pooled socket warns when collected, failing a later test."""
    yield
    for client in _CLIENTS:
        client.close()
    _CLIENTS.clear()


def _sdk(url: str, key: str = "unused"):  # type: ignore[no-untyped-def]
    """An SDK client, closed when the test ends (``_close_clients``)."""
    import openai

    client = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=30)
    _CLIENTS.append(client)
    return client


def test_failing_rehearsal_engine_degrades_instead_of_failing(start_twin, start_double,
                                                               start_gateway) -> None:  # fmt: skip
    """Rehearsal calls answered with 500s: the request still commits a turn, marked degraded."""
    twin = start_twin("--world", "retail", "--seed", "2")
    broken = start_double("status:500", model=TWIN_MODEL)
    gateway = start_gateway(twin.url + "/v1,roles=act", broken.url + "/v1,roles=rehearse")
    completion = chat(_sdk(gateway.url), WORLD, opening(WORLD, WORLD.tasks[0]), seed=1, **KNOBS)
    summary = rehearsal_of(completion)
    assert summary["degraded"] == "engine_error"
    assert completion.choices[0].message.tool_calls or completion.choices[0].message.content
    assert metric_value(gateway.url, "rehearsal_gateway_degraded_total", reason="engine_error") == 1


def test_hanging_rehearsal_engine_hits_the_deadline(start_twin, start_double,
                                                    start_gateway) -> None:  # fmt: skip
    """Rehearsal calls that never answer: the deadline commits from what is known."""
    twin = start_twin("--world", "retail", "--seed", "2")
    hung = start_double("hang", model=TWIN_MODEL)
    gateway = start_gateway(twin.url + "/v1,roles=act", hung.url + "/v1,roles=rehearse")
    # The engine never answers: an answer at all, degraded by "deadline", is the deadline's.
    completion = chat(_sdk(gateway.url), WORLD, opening(WORLD, WORLD.tasks[0]), seed=1,
                      deadline_ms=400, **KNOBS)  # fmt: skip
    assert rehearsal_of(completion)["degraded"] == "deadline"
    assert completion.choices[0].message.tool_calls
    wait_for_running(hung.url, 0)  # the cancelled rehearsal calls left the engine


def test_client_disconnect_cancels_every_rehearsal_call(start_twin, start_double,
                                                        start_gateway) -> None:  # fmt: skip
    """A client that leaves mid-rehearsal cancels the rehearsal's engine calls."""
    twin = start_twin("--world", "retail", "--seed", "2")
    hung = start_double("hang", model=TWIN_MODEL)
    gateway = start_gateway(twin.url + "/v1,roles=act", hung.url + "/v1,roles=rehearse")
    body = {"model": TWIN_MODEL, "messages": opening(WORLD, WORLD.tasks[0]),
            "tools": WORLD.tool_schemas(), "seed": 1, "rehearsal": KNOBS}  # fmt: skip
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=1.5)
    wait_for_running(hung.url, 0)
    assert metric_value(gateway.url, "rehearsal_gateway_in_flight_requests") == 0


def test_grounding_reaches_the_next_rehearsal_prompt(start_twin, start_double, start_gateway,
                                                     prefix: str) -> None:  # fmt: skip
    """A real result sent back is in the few-shot section of the next rehearsal of that tool."""
    env = {"RGW_REDIS_URL": "redis://127.0.0.1:6379/0", "RGW_REDIS_PREFIX": prefix}
    twin = start_twin("--world", "retail", "--seed", "2", "--skill", "1.0")
    gateway = start_gateway(twin.url + "/v1", env=env)
    task = WORLD.tasks[0]
    first, answered = _answered_first_turn(_sdk(gateway.url))
    chat(_sdk(gateway.url), WORLD, answered, seed=2, **KNOBS)
    # A gateway whose rehearsal engine echoes its prompt shows what the rehearsal role received.
    echo = start_double("echo", model=TWIN_MODEL)
    seeing = start_gateway(twin.url + "/v1,roles=act", echo.url + "/v1,roles=rehearse", env=env)
    # No thinking in the acting turn, so the echoed prompt is kept whole as the "imagined" text.
    again = _sdk(seeing.url).chat.completions.create(
        model=TWIN_MODEL, messages=opening(WORLD, task), tools=WORLD.tool_schemas(), seed=1,
        extra_body={"rehearsal": KNOBS, "chat_template_kwargs": {"enable_thinking": False}},
    )  # fmt: skip
    trace = httpx.get(f"{seeing.url}/v1/rehearsals/{rehearsal_of(again)['id']}").json()
    name = first.choices[0].message.tool_calls[0].function.name
    prompts = [o["raw"] for t in trace["trace"] for s in t["steps"] for o in s["observations"]
               if o["call"]["name"] == name]  # fmt: skip
    assert prompts
    few_shot = f"Previous tool calls and results (few-shot):\\nTool name:\\n{name}\\n"
    assert any(few_shot in raw for raw in prompts), prompts[0][:800]


def test_tenants_never_share_grounding_or_traces(two_tenants: str) -> None:
    """Grounding and traces written under one API key are invisible under another."""
    one, two = _sdk(two_tenants, "key-one"), _sdk(two_tenants, "key-two")
    first, answered = _answered_first_turn(one)
    # Key two sends key one's tool result: it is not theirs to record.
    assert rehearsal_of(chat(two, WORLD, answered, seed=2, **KNOBS))["feedback"] == []
    assert len(rehearsal_of(chat(one, WORLD, answered, seed=2, **KNOBS))["feedback"]) == 1
    rid = rehearsal_of(first)["id"]
    headers = {"Authorization": "Bearer key-two"}
    response = httpx.get(f"{two_tenants}/v1/rehearsals/{rid}", headers=headers, timeout=5)
    assert response.status_code == 404
    headers = {"Authorization": "Bearer key-one"}
    assert httpx.get(f"{two_tenants}/v1/rehearsals/{rid}", headers=headers).status_code == 200


def _examples(url: str, key: str, rid: str) -> list[int]:
    trace = httpx.get(f"{url}/v1/rehearsals/{rid}", headers={"Authorization": f"Bearer {key}"})
    return [o["examples"] for t in trace.json()["trace"] for s in t["steps"]
            for o in s["observations"]]  # fmt: skip


def test_grounding_is_per_tenant(two_tenants: str) -> None:
    """After key one grounds a tool, key one's rehearsals carry examples and key two's do not."""
    one, two = _sdk(two_tenants, "key-one"), _sdk(two_tenants, "key-two")
    _, answered = _answered_first_turn(one)
    chat(one, WORLD, answered, seed=2, **KNOBS)
    messages = opening(WORLD, WORLD.tasks[0])
    mine = rehearsal_of(chat(one, WORLD, messages, seed=1, **KNOBS))["id"]
    theirs = rehearsal_of(chat(two, WORLD, messages, seed=1, **KNOBS))["id"]
    assert max(_examples(two_tenants, "key-one", mine)) >= 1
    assert max(_examples(two_tenants, "key-two", theirs)) == 0


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[tuple[int, list[subprocess.Popen[bytes]]]]:
    """A redis-server of this test's own (it will be stopped and restarted)."""
    binary = shutil.which("redis-server")
    assert binary, "redis-server is needed (make test installs it)"
    port = free_port()
    procs: list[subprocess.Popen[bytes]] = []
    yield port, procs
    for proc in procs:
        proc.kill()
        proc.wait(timeout=5)


def _start_redis(port: int, procs: list[subprocess.Popen[bytes]]) -> None:
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no"]  # fmt: skip
    procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    deadline = time.monotonic() + 10
    import redis

    while time.monotonic() < deadline:
        try:
            with redis.Redis(port=port, socket_timeout=0.5) as probe:
                if probe.ping():
                    return
        except redis.RedisError:
            time.sleep(0.05)
    raise RuntimeError("private redis did not start")


def test_redis_stopping_degrades_and_restarting_recovers(start_twin, start_gateway,
                                                         private_redis) -> None:  # fmt: skip
    """Redis down: 200s marked degraded, /ready says so; Redis back: memory resumes."""
    port, procs = private_redis
    _start_redis(port, procs)
    twin = start_twin("--world", "retail", "--seed", "2")
    gateway = start_gateway(twin.url + "/v1", env={"RGW_REDIS_URL": f"redis://127.0.0.1:{port}/0"})
    client = _sdk(gateway.url)
    messages = opening(WORLD, WORLD.tasks[0])
    assert rehearsal_of(chat(client, WORLD, messages, seed=1, **KNOBS))["degraded"] is None
    procs[0].kill()
    procs[0].wait(timeout=5)
    for seed in (2, 3):
        completion = chat(client, WORLD, messages, seed=seed, **KNOBS)
        assert rehearsal_of(completion)["degraded"] == "store_unavailable"
        assert completion.choices[0].message.tool_calls
    ready = httpx.get(gateway.url + "/ready", timeout=5)
    assert ready.status_code == 200
    assert ready.json()["status"] == "degraded"
    assert ready.json()["checks"]["store"]["ok"] is False
    assert metric_value(gateway.url, "rehearsal_gateway_store_errors_total") > 0
    _start_redis(port, procs)
    completion = chat(client, WORLD, messages, seed=4, **KNOBS)
    summary = rehearsal_of(completion)
    assert summary["degraded"] is None
    assert httpx.get(f"{gateway.url}/v1/rehearsals/{summary['id']}").status_code == 200
    assert httpx.get(gateway.url + "/ready", timeout=5).json()["status"] == "ready"


def test_deadline_passing_during_a_streamed_reflect_commit_does_not_break_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The deadline bounds rehearsal; a reflect commit already streaming is finished, not cut."""
    from tests.server.rehearsal_support import running_stack

    twin_args = ("--seed", "2", "--latency", "h100", "--latency-scale", "2")
    with running_stack(tmp_path, twin_args=twin_args) as stack:
        knobs = {"mode": "parallel", "budget": 2, "commit": "reflect", "early_exit": False}
        body = {"model": TWIN_MODEL, "messages": opening(WORLD, WORLD.tasks[0]),
                "tools": WORLD.tool_schemas(), "seed": 1, "rehearsal": knobs}  # fmt: skip
        url = stack.gateway.url + "/v1/chat/completions"
        warm = httpx.post(url, json=body, timeout=60).json()["rehearsal"]["latency_ms"]
        assert warm["commit"] > 400, warm  # long enough for the deadline to land inside it
        # Same request, now with the deadline halfway through the (streamed) commit.
        deadline = int(warm["act"] + warm["rehearse"] + warm["commit"] / 2)
        body = {**body, "stream": True, "rehearsal": {**knobs, "deadline_ms": deadline}}
        with httpx.stream("POST", url, json=body, timeout=60) as response:
            events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert not [c for c in chunks if "error" in c], chunks[-2:]
    pieces = [tc for c in chunks for ch in c["choices"] for tc in ch["delta"].get("tool_calls", [])]
    assert pieces
    assert all(piece["index"] == 0 for piece in pieces)
    assert chunks[-1]["rehearsal"]["degraded"] is None
