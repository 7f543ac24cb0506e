"""``logprobs`` as vLLM 0.32 returns them, whole and streamed, and where a stream's finish lands.

The numbers differ (the twin invents them; a random tiny model is near uniform); the shape, the
count (one entry per generated token, the end-of-turn token included), the tokens spelling the
text, and which chunk carries what are the contract.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.contract.conftest import Engine
from tests.contract.wire import (
    HELLO,
    THINKING_OFF,
    USER_ASKS,
    WEATHER_TOOL,
    forced_tool_call_extra,
    stream_chunks,
    streamed_text,
)

END_OF_TURN = {"<|im_end|>", "<|endoftext|>"}  # the tiny model may end on either
# The twin ignores it and ends its own short answer; vLLM writes exactly this, then stops.
FORCED_TEXT = {"structured_outputs": {"choice": ["hi there"]}}


def _check_entry(entry: dict[str, Any], top: int) -> None:
    assert list(entry) == ["token", "logprob", "bytes", "top_logprobs"]
    assert entry["bytes"] == list(entry["token"].encode("utf-8"))
    assert entry["logprob"] <= 0.0
    alternatives = entry["top_logprobs"]
    assert len(alternatives) == top
    for alternative in alternatives:
        assert list(alternative) == ["token", "logprob", "bytes"]
        assert alternative["bytes"] == list(alternative["token"].encode("utf-8"))
    if top:  # the sampled token comes first, scored as it was sampled
        assert alternatives[0]["token"] == entry["token"]
        assert alternatives[0]["logprob"] == entry["logprob"]


def _entries(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        entry
        for chunk in chunks
        for choice in chunk["choices"]
        for entry in (choice["logprobs"] or {}).get("content", [])
    ]


def test_no_logprobs_unless_asked(engine: Engine, http: httpx.Client) -> None:
    """Without ``logprobs`` a choice's ``logprobs`` is null, and no stream chunk carries any."""
    body = {"model": engine.model, "messages": HELLO, "max_tokens": 4, "seed": 1, **THINKING_OFF}
    assert http.post("/v1/chat/completions", json=body).json()["choices"][0]["logprobs"] is None
    assert all(c["logprobs"] is None for k in stream_chunks(http, body) for c in k["choices"])


@pytest.mark.parametrize("top", [0, 2])
def test_whole_answer_scores_every_generated_token(
    engine: Engine, http: httpx.Client, top: int
) -> None:
    """One entry per generated token; their text is the answer's; alternatives as asked."""
    body = {"model": engine.model, "messages": HELLO, "max_tokens": 6, "seed": 1,
            "logprobs": True, **THINKING_OFF}  # fmt: skip
    if top:
        body["top_logprobs"] = top
    completion = http.post("/v1/chat/completions", json=body).json()
    choice = completion["choices"][0]
    assert choice["finish_reason"] == "length"
    entries = choice["logprobs"]["content"]
    assert list(choice["logprobs"]) == ["content"]
    assert len(entries) == completion["usage"]["completion_tokens"] == 6
    for entry in entries:
        _check_entry(entry, top)
    assert "".join(e["token"] for e in entries) == choice["message"]["content"]


def test_end_of_turn_token_is_scored(engine: Engine, http: httpx.Client) -> None:
    """A turn that ends by itself scores its end-of-turn token last, whole and streamed, and
    the stream's finish rides on that token's own ``{}`` chunk."""
    body = {"model": engine.model, "messages": HELLO, "max_tokens": 64, "seed": 1,
            "logprobs": True, **THINKING_OFF, **FORCED_TEXT}  # fmt: skip
    completion = http.post("/v1/chat/completions", json=body).json()
    choice = completion["choices"][0]
    assert choice["finish_reason"] == "stop"
    entries = choice["logprobs"]["content"]
    assert len(entries) == completion["usage"]["completion_tokens"]
    assert entries[-1]["token"] in END_OF_TURN
    assert "".join(e["token"] for e in entries[:-1]) == choice["message"]["content"]
    chunks = stream_chunks(http, {**body, "stream_options": {"include_usage": True}})
    last = chunks[-2]["choices"][0]  # the usage chunk comes after it
    assert last["finish_reason"] == "stop"
    assert last["delta"] == {}
    assert [e["token"] for e in last["logprobs"]["content"]] in [[t] for t in END_OF_TURN]


def test_streamed_chunks_carry_their_tokens(engine: Engine, http: httpx.Client) -> None:
    """Every chunk after the role chunk carries the logprobs of its own tokens: together they
    spell the streamed text and count the completion tokens."""
    body = {"model": engine.model, "messages": HELLO, "max_tokens": 6, "seed": 1,
            "logprobs": True, "top_logprobs": 1, "stream_options": {"include_usage": True},
            **THINKING_OFF}  # fmt: skip
    chunks = stream_chunks(http, body)
    assert chunks[0]["choices"][0]["logprobs"] is None  # the role chunk
    with_choices = [c for c in chunks[1:] if c["choices"]]
    assert all(c["choices"][0]["logprobs"]["content"] for c in with_choices)
    for chunk in with_choices:
        content = chunk["choices"][0]["delta"].get("content") or ""
        tokens = "".join(e["token"] for e in chunk["choices"][0]["logprobs"]["content"])
        assert tokens == content
    entries = _entries(chunks)
    for entry in entries:
        _check_entry(entry, 1)
    assert len(entries) == chunks[-1]["usage"]["completion_tokens"]
    assert "".join(e["token"] for e in entries) == streamed_text(chunks)


def test_cut_stream_finishes_on_its_last_content_chunk(engine: Engine, http: httpx.Client) -> None:
    """Cut by ``max_tokens``, the finish reason rides on the chunk of the last token — the last
    content chunk — not on a chunk of its own (with or without logprobs)."""
    body = {"model": engine.model, "messages": HELLO, "max_tokens": 6, "seed": 1, **THINKING_OFF}
    for extra in ({}, {"logprobs": True}):
        chunks = stream_chunks(http, {**body, **extra})
        last = chunks[-1]["choices"][0]
        assert last["finish_reason"] == "length"
        assert last["delta"].get("content")
        assert chunks[-1]["system_fingerprint"].startswith("vllm-")
        assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


def test_streamed_tool_call_scores_the_swallowed_tokens(engine: Engine, http: httpx.Client) -> None:
    """With logprobs, the tokens the tool parser swallows still come, on ``{}`` chunks, so a
    streamed tool call scores every generated token, the end-of-turn one last with the finish."""
    body = {"model": engine.model, "messages": USER_ASKS, "tools": [WEATHER_TOOL],
            "max_tokens": 200, "seed": 2, "logprobs": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    if engine.is_vllm:
        body.update(forced_tool_call_extra())
    chunks = stream_chunks(http, body)
    choices = [c["choices"][0] for c in chunks if c["choices"]]
    assert any(c["delta"] == {} and c["logprobs"] for c in choices[:-1])
    assert any(c["delta"].get("tool_calls") for c in choices)
    assert len(_entries(chunks)) == chunks[-1]["usage"]["completion_tokens"]
    assert choices[-1]["finish_reason"] == "tool_calls"
    assert choices[-1]["delta"] == {}
    assert [e["token"] for e in choices[-1]["logprobs"]["content"]] in [[t] for t in END_OF_TURN]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        pytest.param({"top_logprobs": 3}, "top_logprobs", id="top-without-logprobs"),
        pytest.param({"logprobs": True, "top_logprobs": -2}, "top_logprobs", id="top-negative"),
        pytest.param({"logprobs": True, "top_logprobs": 21}, "logprobs", id="top-above-max"),
        pytest.param({"logprobs": True, "top_logprobs": -1}, "logprobs", id="top-whole-vocab"),
    ],
)
def test_bad_logprobs_are_400(
    engine: Engine, http: httpx.Client, extra: dict[str, Any], param: str
) -> None:
    """vLLM's 400s for logprob requests it will not serve, naming the parameter."""
    body = {"model": engine.model, "messages": HELLO, "max_tokens": 2, **extra}
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param
    assert error["type"] == "BadRequestError"
