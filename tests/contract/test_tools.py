"""Tool calls as vLLM's hermes parser returns them, whole and as streamed deltas."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
from openai import OpenAI

from tests.contract.conftest import Engine
from tests.contract.wire import (
    FORCED_ARGUMENTS,
    THINKING_OFF,
    TOOL_CALL_ID,
    USER_ASKS,
    WEATHER_TOOL,
    finish_reasons,
    forced_tool_call_extra,
    stream_chunks,
)


def _tool_request(engine: Engine, **extra: Any) -> dict[str, Any]:
    return {
        "model": engine.model,
        "messages": USER_ASKS,
        "tools": [WEATHER_TOOL],
        "tool_choice": "auto",
        "max_tokens": 64,
        "seed": 11,
        **forced_tool_call_extra(),
        **extra,
    }


def _check_weather_arguments(engine: Engine, arguments: dict[str, Any]) -> None:
    assert isinstance(arguments.get("city"), str)
    if engine.is_vllm:  # only vLLM's text is forced; the twin picks its own arguments
        assert arguments == FORCED_ARGUMENTS


def test_tool_call_parsed(engine: Engine, client: OpenAI) -> None:
    """A tool call comes back parsed: id, function name, JSON arguments, finish ``tool_calls``."""
    completion = client.chat.completions.create(
        model=engine.model,
        messages=USER_ASKS,
        tools=[WEATHER_TOOL],
        tool_choice="auto",
        max_tokens=64,
        seed=11,
        extra_body=forced_tool_call_extra(),
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert not choice.message.content
    calls = choice.message.tool_calls
    assert calls is not None
    assert len(calls) == 1
    call = calls[0]
    assert re.match(TOOL_CALL_ID, call.id), call.id
    assert call.type == "function"
    assert call.function.name == "get_weather"
    _check_weather_arguments(engine, json.loads(call.function.arguments))


def test_tool_call_deltas_reassemble(engine: Engine, http: httpx.Client) -> None:
    """Streamed ``delta.tool_calls`` pieces rebuild the same call the non-streamed answer holds."""
    body = _tool_request(engine)
    whole = http.post("/v1/chat/completions", json=body).json()["choices"][0]
    expected = whole["message"]["tool_calls"][0]["function"]

    pieces = [
        piece
        for chunk in stream_chunks(http, body)
        for choice in chunk["choices"]
        for piece in choice["delta"].get("tool_calls") or []
    ]
    assert pieces, "no tool-call deltas in the stream"
    assert {piece["index"] for piece in pieces} == {0}
    head, tail = pieces[0], pieces[1:]
    # vLLM opens a call with its id, type and name, then streams only argument text.
    assert re.match(TOOL_CALL_ID, head["id"]), head
    assert head["type"] == "function"
    assert head["function"]["name"] == expected["name"]
    tool_deltas = [
        choice["delta"]
        for chunk in stream_chunks(http, body)
        for choice in chunk["choices"]
        if choice["delta"].get("tool_calls")
    ]
    assert all("content" in d and d["content"] is None for d in tool_deltas), tool_deltas
    for piece in tail:
        assert "id" not in piece or piece["id"] is None, piece
        assert piece["function"].get("name") is None, piece
    arguments = "".join(piece["function"].get("arguments") or "" for piece in pieces)
    assert json.loads(arguments) == json.loads(expected["arguments"])
    _check_weather_arguments(engine, json.loads(arguments))


def test_tool_call_stream_finish(engine: Engine, http: httpx.Client) -> None:
    """A streamed tool call ends its choice with ``finish_reason: tool_calls`` and no text."""
    chunks = stream_chunks(http, _tool_request(engine))
    assert finish_reasons(chunks) == {0: ["tool_calls"]}
    text = "".join(
        choice["delta"].get("content") or "" for chunk in chunks for choice in chunk["choices"]
    )
    assert not text.strip()


def test_sdk_stream_tool_call(engine: Engine, client: OpenAI) -> None:
    """The OpenAI SDK's stream of tool-call deltas accumulates into one named call."""
    stream = client.chat.completions.create(
        model=engine.model,
        messages=USER_ASKS,
        tools=[WEATHER_TOOL],
        tool_choice="auto",
        max_tokens=64,
        seed=11,
        stream=True,
        extra_body=forced_tool_call_extra(),
    )
    names, arguments, ids = [], [], []
    with stream:
        for chunk in stream:
            for choice in chunk.choices:
                for piece in choice.delta.tool_calls or []:
                    if piece.id:
                        ids.append(piece.id)
                    if piece.function and piece.function.name:
                        names.append(piece.function.name)
                    if piece.function and piece.function.arguments:
                        arguments.append(piece.function.arguments)
    assert names == ["get_weather"]
    assert len(ids) == 1
    _check_weather_arguments(engine, json.loads("".join(arguments)))


def test_tool_choice_none_answers_in_text(engine: Engine, http: httpx.Client) -> None:
    """With ``tool_choice: none`` the answer is text and carries no tool calls."""
    body = {
        "model": engine.model,
        "messages": USER_ASKS,
        "tools": [WEATHER_TOOL],
        "tool_choice": "none",
        "max_tokens": 12,
        "seed": 4,
        **THINKING_OFF,
    }
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] in {"stop", "length"}
    assert not choice["message"].get("tool_calls")
    assert isinstance(choice["message"]["content"], str)


def test_tool_result_turn_accepted(engine: Engine, client: OpenAI) -> None:
    """A conversation carrying an assistant tool call and its ``tool`` result is answered."""
    messages: list[dict[str, Any]] = [
        *USER_ASKS,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "chatcmpl-tool-0123456789abcdef",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "chatcmpl-tool-0123456789abcdef",
            "content": '{"temperature_c": 18, "sky": "clear"}',
        },
    ]
    completion = client.chat.completions.create(
        model=engine.model,
        messages=messages,  # type: ignore[arg-type]
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        max_tokens=24,
        seed=6,
        extra_body=THINKING_OFF,
    )
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert choice.finish_reason in {"stop", "length", "tool_calls"}
    assert completion.usage is not None
    assert completion.usage.prompt_tokens > 0


def test_call_cut_before_its_end_token(engine: Engine, http: httpx.Client) -> None:
    """``max_tokens`` that leaves out only the end-of-turn token: the whole answer still has the
    call and says ``tool_calls`` (vLLM reports calls its parser found), the stream says
    ``length`` (vLLM keeps the engine's reason once calls were streamed)."""
    body = _tool_request(engine, seed=3)
    full = http.post("/v1/chat/completions", json=body).json()
    assert full["choices"][0]["finish_reason"] == "tool_calls"
    cut = {**body, "max_tokens": full["usage"]["completion_tokens"] - 1}
    whole = http.post("/v1/chat/completions", json=cut).json()
    choice = whole["choices"][0]
    assert whole["usage"]["completion_tokens"] == cut["max_tokens"]
    assert choice["message"]["tool_calls"] == [
        {**c, "id": choice["message"]["tool_calls"][0]["id"]}
        for c in full["choices"][0]["message"]["tool_calls"]
    ]
    assert choice["finish_reason"] == "tool_calls"
    chunks = stream_chunks(http, cut)
    assert finish_reasons(chunks) == {0: ["length"]}
    assert any(c["delta"].get("tool_calls") for k in chunks for c in k["choices"])
