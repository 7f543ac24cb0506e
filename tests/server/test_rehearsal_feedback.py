"""Streaming with rehearsal, the real-result feedback loop, and the store's keys.

Gateway + engine twin + the real Redis server on loopback, driven by the official ``openai`` SDK.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from tests.server.conftest import TWIN_MODEL, metric_value
from tests.server.rehearsal_support import (
    REDIS_URL,
    Stack,
    assistant_turn,
    chat,
    opening,
    rehearsal_of,
    run_committed,
    running_stack,
)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Two gateways sharing one Redis prefix in front of one faithful twin (fidelity 1)."""
    logs = tmp_path_factory.mktemp("feedback")
    twin_args = ("--skill", "0.7", "--fidelity", "1.0", "--seed", "5")
    with running_stack(logs, twin_args=twin_args, gateways=2) as s:
        yield s


def _streamed(client: Any, stack: Stack, messages: list[Any], knobs: dict[str, Any]) -> Any:
    stream = client.chat.completions.create(
        model=TWIN_MODEL, messages=messages, tools=stack.world.tool_schemas(), seed=4,
        stream=True, stream_options={"include_usage": True}, extra_body={"rehearsal": knobs},
    )  # fmt: skip
    content, reasoning, calls, finish, usage, summary = "", "", {}, None, None, None
    for chunk in stream:
        extra = chunk.model_extra or {}
        summary = extra.get("rehearsal", summary)
        usage = chunk.usage or usage
        for choice in chunk.choices:
            delta = choice.delta
            content += delta.content or ""
            reasoning += (delta.model_extra or {}).get("reasoning") or ""
            for piece in delta.tool_calls or []:
                slot = calls.setdefault(piece.index, {"id": None, "name": "", "arguments": ""})
                slot["id"] = piece.id or slot["id"]
                slot["name"] += piece.function.name or "" if piece.function else ""
                slot["arguments"] += piece.function.arguments or "" if piece.function else ""
            finish = choice.finish_reason or finish
    return content, reasoning, [calls[i] for i in sorted(calls)], finish, usage, summary


@pytest.mark.parametrize("commit", ["anchored", "select", "reflect"])
def test_stream_reassembles_to_the_non_stream_answer(stack: Stack, commit: str) -> None:
    """For one seed, the streamed committed turn equals the non-streamed one (ids aside)."""
    client = stack.sdk()
    messages = opening(stack.world, stack.world.tasks[4])
    knobs = {"mode": "parallel", "budget": 3, "commit": commit, "early_exit": False}
    whole = chat(client, stack.world, messages, seed=4, **knobs)
    content, reasoning, calls, finish, usage, summary = _streamed(client, stack, messages, knobs)
    message = whole.choices[0].message
    assert content == (message.content or "")
    assert reasoning == ((message.model_extra or {}).get("reasoning") or "")
    assert [(c["name"], c["arguments"]) for c in calls] == [
        (c.function.name, c.function.arguments) for c in message.tool_calls or []
    ]
    assert all(c["id"].startswith("call_") for c in calls)
    assert finish == whole.choices[0].finish_reason
    assert usage is not None
    assert usage.total_tokens == whole.usage.total_tokens
    assert summary is not None
    assert summary["mode"] == "parallel"


def test_stream_shows_progress_comments_before_the_answer(stack: Stack) -> None:
    """While rehearsing, the SSE stream carries ``: rehearsing i/N`` comments, then chunks."""
    body = {
        "model": TWIN_MODEL, "messages": opening(stack.world, stack.world.tasks[5]),
        "tools": stack.world.tool_schemas(), "stream": True, "seed": 1,
        "rehearsal": {"mode": "parallel", "budget": 4, "early_exit": False},
    }  # fmt: skip
    with httpx.stream("POST", stack.gateway.url + "/v1/chat/completions", json=body,
                      timeout=30) as response:  # fmt: skip
        assert response.status_code == 200
        assert response.headers["x-rehearsal-id"].startswith("rh_")
        lines = [line for line in response.iter_lines() if line]
    assert lines[0] == ": rehearsing 0/4"
    first_data = next(i for i, line in enumerate(lines) if line.startswith("data:"))
    assert all(line.startswith(": ") for line in lines[:first_data])
    assert lines[-1] == "data: [DONE]"


def test_tool_result_feeds_back_fidelity_latency_grounding_and_memory(stack: Stack) -> None:
    """A real result for a minted id yields fidelity, real latency, grounding and a trace note."""
    client, world = stack.sdk(), stack.world
    task = world.tasks[0]
    messages = opening(world, task)
    first = chat(client, world, messages, mode="parallel", budget=4, commit="select", seed=3,
                 headers={"X-Session-Id": "feedback-session"})  # fmt: skip
    state = world.new_state(task)
    results = run_committed(world, state, first)
    assert len(results) == 1
    time.sleep(0.3)  # the real tool takes a while
    real_calls_before = metric_value(
        stack.gateway.url, "rehearsal_gateway_real_tool_call_seconds_count"
    )
    messages += [assistant_turn(first)] + [
        {"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)}
        for call_id, result in results
    ]
    second = chat(client, world, messages, mode="parallel", budget=2, commit="select", seed=4,
                  headers={"X-Session-Id": "feedback-session"})  # fmt: skip
    (learned,) = rehearsal_of(second)["feedback"]
    assert learned["tool_call_id"] == results[0][0]
    assert learned["fidelity"] == 1.0  # fidelity 1 twin: the imagination was exact
    assert learned["real_ms"] >= 300
    after = metric_value(stack.gateway.url, "rehearsal_gateway_real_tool_call_seconds_count")
    assert after == real_calls_before + 1
    trace = httpx.get(f"{stack.gateway.url}/v1/rehearsals/{rehearsal_of(first)['id']}").json()
    assert trace["feedback"][0]["real_result"] == results[0][1]
    keys = stack.redis_keys()
    assert any(":ground:" in key for key in keys)
    assert any(":memory:" in key for key in keys)
    # The same tool result again is no longer pending: nothing is counted twice.
    third = chat(client, world, messages, mode="parallel", budget=2, commit="select", seed=5)
    assert rehearsal_of(third)["feedback"] == []


def test_every_key_the_gateway_writes_has_a_ttl(stack: Stack) -> None:
    """Scanning the gateway's prefix finds no key without an expiry."""
    chat(stack.sdk(), stack.world, opening(stack.world, stack.world.tasks[6]),
         mode="sequential", budget=2, seed=9)  # fmt: skip
    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(match=stack.prefix + "*"))
        assert keys
        for key in keys:
            assert client.ttl(key) > 0, key
    finally:
        client.close()


def test_a_replica_matches_a_call_another_replica_committed(stack: Stack) -> None:
    """Gateway B records the feedback for a call gateway A committed; both read the trace."""
    world = stack.world
    task = world.tasks[7]
    messages = opening(world, task)
    first = chat(stack.sdk(0), world, messages, mode="parallel", budget=3, commit="select", seed=6)
    results = run_committed(world, world.new_state(task), first)
    messages += [assistant_turn(first)] + [
        {"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)}
        for call_id, result in results
    ]
    second = chat(stack.sdk(1), world, messages, mode="parallel", budget=2, seed=7)
    (learned,) = rehearsal_of(second)["feedback"]
    assert learned["fidelity"] is not None
    rid = rehearsal_of(first)["id"]
    for gateway in stack.gateways:
        response = httpx.get(f"{gateway.url}/v1/rehearsals/{rid}", timeout=5)
        assert response.status_code == 200
        assert response.json()["feedback"][0]["tool_call_id"] == learned["tool_call_id"]


def test_unknown_trace_is_a_404_envelope(stack: Stack) -> None:
    """An unknown rehearsal id is a 404 in the OpenAI error envelope."""
    response = httpx.get(f"{stack.gateway.url}/v1/rehearsals/rh_nope", timeout=5)
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found_error"


def test_tool_results_for_unknown_ids_pass_through(stack: Stack) -> None:
    """A tool message answering an id the gateway never minted is relayed, not an error."""
    world = stack.world
    messages = [
        *opening(world, world.tasks[0]),
        {"role": "assistant", "content": "", "tool_calls": [{
            "id": "call_notours000000000000000", "type": "function",
            "function": {"name": "get_order", "arguments": "{\"order_id\": \"#W0\"}"}}]},
        {"role": "tool", "tool_call_id": "call_notours000000000000000", "content": "{}"},
    ]  # fmt: skip
    completion = chat(stack.sdk(), world, messages, mode="parallel", budget=2, seed=1)
    assert rehearsal_of(completion)["feedback"] == []
