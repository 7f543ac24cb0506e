"""The official openai SDK against the gateway: chat and responses, sync and async, whole and
streamed, rehearsal off and on — in front of the twin, and in front of a real vLLM CPU engine.

Every case asks for the same weather call (the real vLLM is forced to write it through its own
hermes parser, ``tests/contract/wire.py``; the twin makes its own call to the same tool). Off, the
gateway's answer must carry the call the engine gives when asked directly; on, the gateway answers
itself, and its answer must still follow the shapes every SDK loop relies on: only the usage chunk
has empty ``choices`` and it comes last, the summary rides on a chunk with a choice, the engine's
``system_fingerprint`` and ``completion_tokens_details`` are kept, and a Responses stream is the
event sequence vLLM and OpenAI send.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from tests.clients.conftest import API_KEY
from tests.contract.wire import FORCED_ARGUMENTS, USER_ASKS, WEATHER_TOOL, forced_tool_call_extra
from tests.server.conftest import FAST_HEALTH, TWIN_MODEL
from tests.support import inprocess
from tests.support.procs import Proc
from tests.support.vllm import SERVED_MODEL_NAME

KNOBS = {"mode": "parallel", "budget": 2}
RESPONSES_TOOL = {"type": "function", **WEATHER_TOOL["function"]}
# Responses stream events every function-call answer has, in this order (others may sit between).
CALL_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.output_item.done",
    "response.completed",
]


@dataclass(frozen=True)
class Target:
    """A gateway under test, the engine behind it, and the model name they serve."""

    kind: str
    gateway: str
    engine: str
    model: str

    def client(self, url: str, *, sync: bool) -> Any:
        kind = openai.OpenAI if sync else openai.AsyncOpenAI
        return kind(base_url=url + "/v1", api_key=API_KEY, max_retries=0, timeout=240)


@pytest.fixture(scope="module")
def vllm_target(vllm_engine: Proc, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """A gateway (in-process store, API keys on) in front of the session's real vLLM."""
    gateway = inprocess.start_gateway(
        ["--engine", vllm_engine.url + "/v1"],
        log_path=tmp_path_factory.mktemp("sdk-vllm") / "gateway.log",
        env={**FAST_HEALTH, "RGW_API_KEYS": API_KEY},
    )
    yield Target("vllm", gateway.url, vllm_engine.url, SERVED_MODEL_NAME)
    gateway.stop()


@pytest.fixture(
    params=[
        pytest.param("twin", id="twin"),
        pytest.param("vllm", id="vllm", marks=[pytest.mark.vllm, pytest.mark.timeout(400)]),
    ],
    scope="module",
)
def target(request: pytest.FixtureRequest) -> Target:
    if request.param == "vllm":
        found: Target = request.getfixturevalue("vllm_target")
        return found
    stack = request.getfixturevalue("exact_stack")  # plays the call right: no planted mistakes
    return Target("twin", stack.gateway.url, stack.twin.url, TWIN_MODEL)


def _chat_kwargs(target: Target, rehearsed: bool) -> dict[str, Any]:
    extra = forced_tool_call_extra()
    if rehearsed:
        extra["rehearsal"] = KNOBS
    return {"model": target.model, "messages": USER_ASKS, "tools": [WEATHER_TOOL], "seed": 4,
            "max_tokens": 64, "extra_body": extra}  # fmt: skip


def _responses_kwargs(target: Target, rehearsed: bool) -> dict[str, Any]:
    kwargs = _chat_kwargs(target, rehearsed)
    return {"model": target.model, "input": USER_ASKS[0]["content"], "tools": [RESPONSES_TOOL],
            "max_output_tokens": 64, "extra_body": {**kwargs["extra_body"], "seed": 4}}  # fmt: skip


# --------------------------------------------------------------------------- chat completions


async def _drain_async(stream: Any) -> list[Any]:
    return [chunk async for chunk in stream]


def _chat(target: Target, url: str, *, sync: bool, stream: bool, rehearsed: bool) -> list[Any]:
    """One chat call through the SDK: ``[completion]`` or the list of chunks."""
    kwargs = _chat_kwargs(target, rehearsed)
    if stream and not sync:  # the async cases ask for usage, the sync ones do not
        kwargs["stream_options"] = {"include_usage": True}

    async def asynchronous() -> list[Any]:
        async with target.client(url, sync=False) as client:
            answer = await client.chat.completions.create(stream=stream, **kwargs)
            return await _drain_async(answer) if stream else [answer]

    if not sync:
        result: list[Any] = asyncio.run(asynchronous())
        return result
    with target.client(url, sync=True) as client:
        answer = client.chat.completions.create(stream=stream, **kwargs)
        return list(answer) if stream else [answer]


def _call_of_message(completion: Any) -> tuple[str, dict[str, Any], str]:
    choice = completion.choices[0]
    calls = choice.message.tool_calls or []
    assert len(calls) == 1, choice.message
    return calls[0].function.name, json.loads(calls[0].function.arguments), choice.finish_reason


def _call_of_chunks(chunks: list[Any], *, usage: bool) -> tuple[str, dict[str, Any], str]:
    """The call a stream spells out, checking OpenAI's chunk rules on the way."""
    empty = [at for at, chunk in enumerate(chunks) if not chunk.choices]
    # Only the usage chunk has empty choices, and it is the last: ``chunk.choices[0]`` is safe
    # in every tutorial's loop, and ``include_usage`` readers find usage at the end.
    assert empty == ([len(chunks) - 1] if usage else []), empty
    if usage:
        assert chunks[-1].usage is not None
        assert chunks[-1].usage.completion_tokens > 0
    name, arguments, finish = "", "", None
    for chunk in chunks:
        for choice in chunk.choices:
            for piece in choice.delta.tool_calls or []:
                name += piece.function.name or "" if piece.function else ""
                arguments += piece.function.arguments or "" if piece.function else ""
            finish = choice.finish_reason or finish
    assert finish is not None
    return name, json.loads(arguments), finish


def _chat_summary(answers: list[Any]) -> dict[str, Any] | None:
    carriers = [a for a in answers if "rehearsal" in (a.model_extra or {})]
    assert len(carriers) <= 1
    if not carriers:
        return None
    carrier = carriers[0]
    # On the finish chunk (a choice with a finish reason) or on the usage chunk (the last).
    if carrier.object == "chat.completion.chunk":
        assert carrier.usage is not None or carrier.choices[0].finish_reason is not None
    summary: dict[str, Any] = carrier.model_extra["rehearsal"]
    return summary


def _fingerprint(answers: list[Any]) -> str | None:
    found = {a.system_fingerprint for a in answers if a.system_fingerprint is not None}
    assert len(found) <= 1
    return found.pop() if found else None


@pytest.mark.parametrize("rehearsed", [False, True], ids=["off", "rehearsed"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_chat_completions(target: Target, sync: bool, stream: bool, rehearsed: bool) -> None:
    """chat.completions.create through the gateway gives the engine's call, in OpenAI's shapes."""
    direct = _chat(target, target.engine, sync=True, stream=False, rehearsed=False)[0]
    answers = _chat(target, target.gateway, sync=sync, stream=stream, rehearsed=rehearsed)
    got = _call_of_chunks(answers, usage=not sync) if stream else _call_of_message(answers[0])
    name, arguments, finish = got
    assert (name, finish) == ("get_weather", "tool_calls")
    assert isinstance(arguments.get("city"), str)
    if target.kind == "vllm":
        assert arguments == FORCED_ARGUMENTS
    if not rehearsed:
        # What the engine answers when asked directly, the same seed, the same call.
        assert got == _call_of_message(direct)
    summary = _chat_summary(answers)
    assert (summary is not None) == rehearsed
    if summary is not None:
        assert summary["mode"] == "parallel"
    # The engine's fingerprint, also on an answer the gateway wrote itself.
    assert _fingerprint(answers) == direct.system_fingerprint
    if not stream:
        details = answers[0].usage.completion_tokens_details
        assert details is not None
        assert details.reasoning_tokens is not None


# --------------------------------------------------------------------------- responses


def _responses(target: Target, url: str, *, sync: bool, stream: bool, rehearsed: bool) -> Any:
    """One responses call: the response object, or ``(event types, final response)``."""
    kwargs = _responses_kwargs(target, rehearsed)

    def read(events: list[Any]) -> tuple[list[str], Any]:
        numbers = [event.sequence_number for event in events]
        assert numbers == list(range(len(events)))
        return [event.type for event in events], events[-1].response

    async def asynchronous() -> Any:
        async with target.client(url, sync=False) as client:
            if not stream:
                return await client.responses.create(**kwargs)
            # The SDK's stream helper on the async side, the raw event iterator on the sync side.
            async with client.responses.stream(**kwargs) as events:
                seen = [event async for event in events]
            return read([e for e in seen if e.type.startswith("response.")])

    if not sync:
        return asyncio.run(asynchronous())
    with target.client(url, sync=True) as client:
        if not stream:
            return client.responses.create(**kwargs)
        return read(list(client.responses.create(stream=True, **kwargs)))


def _function_call(response: Any) -> tuple[str, dict[str, Any]]:
    calls = [item for item in response.output if item.type == "function_call"]
    assert len(calls) == 1, response.output
    assert response.status == "completed"
    return calls[0].name, json.loads(calls[0].arguments)


def _in_order(kinds: list[str], expected: list[str]) -> bool:
    rest = iter(kinds)
    return all(kind in rest for kind in expected)


@pytest.mark.parametrize("rehearsed", [False, True], ids=["off", "rehearsed"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_responses(target: Target, sync: bool, stream: bool, rehearsed: bool) -> None:
    """responses.create / responses.stream through the gateway: a function_call output item."""
    answer = _responses(target, target.gateway, sync=sync, stream=stream, rehearsed=rehearsed)
    if stream:
        kinds, response = answer
        assert kinds[0] == "response.created"
        assert kinds[-1] == "response.completed"
        assert _in_order(kinds, CALL_EVENTS), kinds
    else:
        response = answer
    name, arguments = _function_call(response)
    assert name == "get_weather"
    assert isinstance(arguments.get("city"), str)
    if target.kind == "vllm":
        assert arguments == FORCED_ARGUMENTS
    if not rehearsed:
        direct = _responses(target, target.engine, sync=True, stream=False, rehearsed=False)
        assert (name, arguments) == _function_call(direct)
    summary = (response.model_extra or {}).get("rehearsal")
    assert (summary is not None) == rehearsed
    if summary is not None:
        assert summary["mode"] == "parallel"
    assert response.usage is not None
    assert response.usage.output_tokens > 0


def test_the_summary_names_a_stored_trace(target: Target) -> None:
    """A rehearsed answer's summary id opens its trace, on either engine."""
    answers = _chat(target, target.gateway, sync=True, stream=False, rehearsed=True)
    summary = _chat_summary(answers)
    assert summary is not None
    trace = httpx.get(f"{target.gateway}/v1/rehearsals/{summary['id']}", timeout=10,
                      headers={"Authorization": f"Bearer {API_KEY}"})  # fmt: skip
    assert trace.status_code == 200
    (committed,) = trace.json()["committed"]["tool_calls"]
    (call,) = answers[0].choices[0].message.tool_calls
    assert (committed["id"], committed["name"]) == (call.id, "get_weather")
