"""OpenAI-shaped values: reading engine answers, writing request bodies, canonical signatures."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest

from rehearsal_gateway.rehearsal.errors import GeneratorError, MalformedResponse
from rehearsal_gateway.rehearsal.messages import (
    AssistantTurn,
    GenerationRequest,
    GenerationResponse,
    ToolCall,
    Usage,
    canonical_json,
    from_openai_response,
    usage_counts,
)


def completion(*messages: dict[str, Any], usage: Any = None) -> dict[str, Any]:
    choices = [
        {"index": i, "message": m, "finish_reason": "tool_calls"} for i, m in enumerate(messages)
    ]
    return {"id": "x", "object": "chat.completion", "choices": choices, "usage": usage}


def test_reads_a_vllm_completion_with_reasoning_and_tool_calls() -> None:
    """Choices, reasoning, tool calls and usage (cached tokens included) are read."""
    body = completion(
        {
            "role": "assistant",
            "content": None,
            "reasoning": "look it up",
            "tool_calls": [
                {
                    "id": "chatcmpl-tool-1",
                    "type": "function",
                    "function": {"name": "get_order", "arguments": '{"order_id": "#W1"}'},
                },
            ],
        },
        usage={
            "prompt_tokens": 50,
            "completion_tokens": 7,
            "prompt_tokens_details": {"cached_tokens": 32},
        },
    )
    response = from_openai_response(body)
    (turn,) = response.choices
    assert turn.reasoning == "look it up"
    assert turn.tool_calls == (ToolCall("chatcmpl-tool-1", "get_order", '{"order_id": "#W1"}'),)
    assert turn.finish_reason == "tool_calls"
    assert response.usage == Usage(50, 7, 32)


def test_reads_older_reasoning_content_and_orders_choices_by_index() -> None:
    """``reasoning_content`` is accepted and choices follow their ``index``."""
    body = completion({"content": "b", "reasoning_content": "r"}, {"content": "a"})
    body["choices"][0]["index"], body["choices"][1]["index"] = 1, 0
    body["choices"][0]["message"]["role"] = "assistant"
    response = from_openai_response(body)
    assert [c.content for c in response.choices] == ["a", "b"]
    assert response.choices[1].reasoning == "r"
    assert response.usage == Usage()


def test_rereads_tool_calls_the_engine_parser_missed() -> None:
    """Hermes blocks left in ``content`` become tool calls with deterministic ids."""
    text = (
        '<think>\nhm\n</think>\n\nOK<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
    )
    (turn,) = from_openai_response(completion({"content": text})).choices
    assert turn.tool_calls == (ToolCall("call-0-0", "f", '{"a": 1}'),)
    assert (turn.content, turn.reasoning) == ("OK", "hm")


def test_odd_fields_are_tolerated() -> None:
    """Non-string ids, object arguments, odd usage and a bool index fall back to safe values."""
    message = {
        "content": 3,
        "reasoning": 4,
        "tool_calls": [
            {"id": 5, "function": {"name": "f", "arguments": {"a": 1}}},
            {"function": {"name": "g"}},
        ],
    }
    body = completion(message, usage={"prompt_tokens": True, "prompt_tokens_details": None})
    body["choices"][0]["index"] = True
    body["choices"][0]["finish_reason"] = 1
    (turn,) = from_openai_response(body).choices
    assert turn == AssistantTurn(
        None, None, (ToolCall("call-0-0", "f", '{"a": 1}'), ToolCall("call-0-1", "g", "{}")), None
    )
    assert from_openai_response(body).usage == Usage()
    odd = {
        "prompt_tokens": -5,
        "completion_tokens": 3.5,
        "prompt_tokens_details": {"cached_tokens": -1},
    }
    assert Usage.from_openai(odd) == Usage()  # a count is a non-negative int, or zero


@pytest.mark.parametrize(
    ("usage", "counts"),
    [
        (None, (0, 0, 0, 0)),
        (3, (0, 0, 0, 0)),
        ("usage", (0, 0, 0, 0)),
        ({}, (0, 0, 0, 0)),
        ({"prompt_tokens": 7, "completion_tokens": 2}, (7, 2, 0, 0)),
        ({"prompt_tokens": 7, "prompt_tokens_details": None}, (7, 0, 0, 0)),
        ({"prompt_tokens": 7, "prompt_tokens_details": {"cached_tokens": 5}}, (7, 0, 5, 0)),
        ({"completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 4}},
         (0, 9, 0, 4)),
        ({"prompt_tokens": False, "completion_tokens": 1.0, "prompt_tokens_details": []},
         (0, 0, 0, 0)),
        (MappingProxyType({"prompt_tokens": 2, "prompt_tokens_details": {"cached_tokens": 1}}),
         (2, 0, 1, 0)),
    ],
)  # fmt: skip
def test_usage_counts_of_a_usage_object(usage: object, counts: tuple[int, ...]) -> None:
    """The pass-through's tuple (``usage_counts``) and the rehearsal's ``Usage`` read one
    ``usage`` object alike: odd or absent fields count as zero, a mapping counts as a dict."""
    assert usage_counts(usage) == counts
    assert Usage.from_openai(usage) == Usage(*counts)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param([], id="not-object"),
        pytest.param({"choices": []}, id="no-choices"),
        pytest.param({"choices": [{"message": "x"}]}, id="message-not-object"),
        pytest.param({"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}, id="no-name"),
        pytest.param({"choices": [{"message": {"tool_calls": ["x"]}}]}, id="call-not-object"),
    ],
)
def test_malformed_completions_raise_a_generator_error(body: Any) -> None:
    """A body that is not a chat completion raises MalformedResponse, a GeneratorError."""
    with pytest.raises(MalformedResponse) as caught:
        from_openai_response(body)
    assert isinstance(caught.value, GeneratorError)


def test_request_body_is_openai_shaped() -> None:
    """The body carries messages, tools, n and set sampling fields, with extras passed through."""
    request = GenerationRequest(
        role="act",
        messages=({"role": "user", "content": "hi"},),
        tools=({"type": "function", "function": {"name": "f"}},),
        n=4,
        temperature=0.6,
        seed=3,
        extra={"top_k": 20, "tool_choice": "auto"},
    )
    assert request.to_openai_body() == {
        "top_k": 20,
        "tool_choice": "auto",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "n": 4,
        "temperature": 0.6,
        "seed": 3,
    }
    rehearse = GenerationRequest(role="rehearse", messages=())
    assert "tools" not in rehearse.to_openai_body()


def test_signatures_ignore_key_order_but_keep_array_order() -> None:
    """Equal actions share a signature; arrays keep their order; answers are ``answer``."""
    a = ToolCall("1", "f", '{"b": [1, 2], "a": "é"}')
    b = ToolCall("2", "f", '{"a":"é","b":[1,2]}')
    c = ToolCall("3", "f", '{"a":"é","b":[2,1]}')
    assert a.signature == b.signature == 'f {"a":"é","b":[1,2]}'
    assert a.signature != c.signature
    assert ToolCall("4", "f", "not json").signature == 'f "not json"'
    assert AssistantTurn("hi").signature == "answer"
    assert AssistantTurn(tool_calls=(a, c)).actions == (a.signature, c.signature)
    assert AssistantTurn(tool_calls=(a,)).signature == 'f {"a":"é","b":[1,2]}'
    assert AssistantTurn(tool_calls=(a, c)).signature == f"{a.signature}\n{c.signature}"
    assert AssistantTurn("hi").actions == ("answer",)
    assert canonical_json({"b": 1, "a": None}) == '{"a":null,"b":1}'


def test_turn_renders_as_the_model_wrote_it_and_as_a_message() -> None:
    """``raw_text`` rebuilds thinking, content and hermes blocks; ``to_message`` is OpenAI's."""
    call = ToolCall("c1", "f", '{"a": 1}')
    turn = AssistantTurn("Let me check.", "think", (call,))
    assert turn.raw_text() == (
        '<think>\nthink\n</think>\n\nLet me check.\n<tool_call>\n{"name": "f", "arguments": '
        '{"a": 1}}\n</tool_call>'
    )
    assert AssistantTurn("hi").raw_text() == "hi"
    assert turn.to_message() == {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
        ],
    }
    assert AssistantTurn("hi").to_message() == {"role": "assistant", "content": "hi"}


def test_the_engines_fingerprint_reaches_every_choice() -> None:
    """A body's system_fingerprint is kept on each turn, so the committed answer can carry it."""
    body = {
        "system_fingerprint": "vllm-0.32.0",
        "choices": [
            {"index": 1, "message": {"role": "assistant", "content": "b"}},
            {"index": 0, "message": {"role": "assistant", "content": "a"}},
        ],
    }
    response = GenerationResponse.from_openai(body)
    assert [turn.content for turn in response.choices] == ["a", "b"]
    assert {turn.engine_fields["system_fingerprint"] for turn in response.choices} == {
        "vllm-0.32.0"
    }


def test_with_calls_and_with_id_keep_every_other_field() -> None:
    """The spelled-out copies change one field and keep the rest, as ``replace`` would."""
    import dataclasses

    call = ToolCall("c-1", "get_order", '{"order_id": "#1"}')
    turn = AssistantTurn("text", "thinking", (call,), "tool_calls", {"stop_reason": 7})
    other = (call.with_id("c-2"),)
    assert other[0] == dataclasses.replace(call, id="c-2")
    assert {f.name for f in dataclasses.fields(ToolCall)} == {"id", "name", "arguments"}
    moved = turn.with_calls(other)
    assert moved == dataclasses.replace(turn, tool_calls=other)
    assert moved.engine_fields == {"stop_reason": 7}  # compared apart: compare=False
    assert [f.name for f in dataclasses.fields(AssistantTurn)] == [
        "content", "reasoning", "tool_calls", "finish_reason", "engine_fields",
    ]  # fmt: skip
