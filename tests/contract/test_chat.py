"""Plain chat completions, non-streamed and streamed, as vLLM frames them."""

from __future__ import annotations

import httpx
from openai import OpenAI

from tests.contract.conftest import Engine
from tests.contract.wire import HELLO, THINKING_OFF, finish_reasons, stream_chunks, streamed_text


def test_completion_envelope(engine: Engine, client: OpenAI) -> None:
    """A non-streamed answer has vLLM's envelope, one assistant choice and consistent usage."""
    completion = client.chat.completions.create(
        model=engine.model, messages=HELLO, max_tokens=12, seed=1, extra_body=THINKING_OFF
    )
    assert completion.id.startswith("chatcmpl-")
    assert completion.object == "chat.completion"
    assert completion.model == engine.model
    assert isinstance(completion.created, int)
    assert len(completion.choices) == 1
    choice = completion.choices[0]
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str)
    assert choice.message.content
    assert not choice.message.tool_calls
    assert choice.finish_reason in {"stop", "length"}
    usage = completion.usage
    assert usage is not None
    assert usage.prompt_tokens > 0
    assert 0 < usage.completion_tokens <= 12
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_usage_reports_cached_tokens(engine: Engine, http: httpx.Client) -> None:
    """``usage.prompt_tokens_details.cached_tokens`` is an integer within the prompt size."""
    body = {"model": engine.model, "messages": HELLO, "max_tokens": 4, **THINKING_OFF}
    usage = http.post("/v1/chat/completions", json=body).json()["usage"]
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    assert isinstance(cached, int)
    assert 0 <= cached <= usage["prompt_tokens"]


def test_text_message_fields(engine: Engine, http: httpx.Client) -> None:
    """A text answer's message has vLLM's keys (no ``tool_calls``), and a vLLM fingerprint."""
    body = {"model": engine.model, "messages": HELLO, "max_tokens": 6, "seed": 1, **THINKING_OFF}
    completion = http.post("/v1/chat/completions", json=body).json()
    message = completion["choices"][0]["message"]
    assert list(message) == [
        "role",
        "content",
        "refusal",
        "annotations",
        "audio",
        "function_call",
        "reasoning",
    ]
    assert completion["system_fingerprint"].startswith("vllm-")
    assert completion["id"].startswith("chatcmpl-")


def test_thinking_cut_counts_reasoning_tokens(engine: Engine, http: httpx.Client) -> None:
    """A thought cut by ``max_tokens`` is all reasoning, and usage counts it so."""
    body = {"model": engine.model, "messages": HELLO, "max_tokens": 4, "seed": 1}
    completion = http.post("/v1/chat/completions", json=body).json()
    choice = completion["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["content"] is None
    assert choice["message"]["reasoning"]
    assert completion["usage"]["completion_tokens"] == 4
    assert completion["usage"]["completion_tokens_details"] == {"reasoning_tokens": 4}


def test_thinking_goes_to_reasoning(engine: Engine, http: httpx.Client) -> None:
    """With thinking on, the thought arrives in ``message.reasoning``; with it off, none does."""
    body = {"model": engine.model, "messages": HELLO, "max_tokens": 16, "seed": 3}
    thinking = http.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
    assert isinstance(thinking["reasoning"], str)
    assert thinking["reasoning"]
    silent = http.post("/v1/chat/completions", json={**body, **THINKING_OFF}).json()
    assert silent["choices"][0]["message"].get("reasoning") is None


def test_stream_framing(engine: Engine, http: httpx.Client) -> None:
    """A stream is chunks of one id, a role delta first, one finish, then a usage-only chunk."""
    body = {
        "model": engine.model,
        "messages": HELLO,
        "max_tokens": 12,
        "seed": 1,
        "stream_options": {"include_usage": True},
        **THINKING_OFF,
    }
    chunks = stream_chunks(http, body)
    assert {chunk["id"] for chunk in chunks} == {chunks[0]["id"]}
    assert chunks[0]["id"].startswith("chatcmpl-")
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    assert {chunk["model"] for chunk in chunks} == {engine.model}
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    reasons = finish_reasons(chunks)
    assert list(reasons) == [0]
    assert len(reasons[0]) == 1
    assert reasons[0][0] in {"stop", "length"}
    last = chunks[-1]
    assert last["choices"] == []
    usage = last["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert all(chunk.get("usage") is None for chunk in chunks[:-1])


def test_stream_without_usage_option_sends_no_usage(engine: Engine, http: httpx.Client) -> None:
    """Without ``stream_options.include_usage`` no chunk carries usage."""
    body = {"model": engine.model, "messages": HELLO, "max_tokens": 6, **THINKING_OFF}
    chunks = stream_chunks(http, body)
    assert all(chunk.get("usage") is None for chunk in chunks)
    assert all(chunk["choices"] for chunk in chunks)


def test_stream_equals_non_stream(engine: Engine, client: OpenAI, http: httpx.Client) -> None:
    """With the same seed, the streamed text and finish reason match the non-streamed answer."""
    body = {"model": engine.model, "messages": HELLO, "max_tokens": 12, "seed": 5, **THINKING_OFF}
    whole = http.post("/v1/chat/completions", json=body).json()["choices"][0]
    chunks = stream_chunks(http, body)
    assert streamed_text(chunks) == whole["message"]["content"]
    assert finish_reasons(chunks)[0] == [whole["finish_reason"]]


def test_sdk_stream(engine: Engine, client: OpenAI) -> None:
    """The OpenAI SDK consumes the stream: text deltas, then a finish reason."""
    stream = client.chat.completions.create(
        model=engine.model,
        messages=HELLO,
        max_tokens=8,
        seed=2,
        stream=True,
        extra_body=THINKING_OFF,
    )
    text, reasons = [], []
    with stream:
        for chunk in stream:
            for choice in chunk.choices:
                text.append(choice.delta.content or "")
                if choice.finish_reason:
                    reasons.append(choice.finish_reason)
    assert "".join(text)
    assert len(reasons) == 1
    assert reasons[0] in {"stop", "length"}
