"""Requests and readers shared by the contract tests: one tool, the forcing trick, SSE parsing.

A random tiny model never writes a meaningful tool call on its own, so the vLLM half forces the
*text* of one with ``structured_outputs`` and lets the real hermes parser turn it into
``tool_calls``. The twin ignores ``structured_outputs`` and makes its own call to the same tool,
so tests assert the exact call only on vLLM and the shape on both. Forcing works only once the
reasoning section is over, which is why those requests switch thinking off.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
        },
    },
}
FORCED_ARGUMENTS = {"city": "Paris"}
_FORCED_TEXT = (
    "<tool_call>\n"
    + json.dumps({"name": "get_weather", "arguments": FORCED_ARGUMENTS})
    + "\n</tool_call>"
)
THINKING_OFF: dict[str, Any] = {"chat_template_kwargs": {"enable_thinking": False}}
USER_ASKS = [{"role": "user", "content": "What is the weather in Paris right now?"}]
HELLO = [{"role": "user", "content": "Say hello in a few words."}]
TOOL_CALL_ID = r"^chatcmpl-tool-[0-9a-f]{16}$"


def forced_tool_call_extra() -> dict[str, Any]:
    """Extra body fields that make a real vLLM emit the weather call through its parser."""
    return {**THINKING_OFF, "structured_outputs": {"choice": [_FORCED_TEXT]}}


def stream_chunks(http: httpx.Client, body: dict[str, Any]) -> list[dict[str, Any]]:
    """POST a streaming chat request; return the decoded chunks, checking the SSE framing."""
    chunks: list[dict[str, Any]] = []
    done = False
    with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if not line:
                continue
            assert line.startswith("data: "), f"not an SSE data line: {line!r}"
            assert not done, "data after [DONE]"
            payload = line.removeprefix("data: ")
            if payload == "[DONE]":
                done = True
            else:
                chunks.append(json.loads(payload))
    assert done, "the stream did not end with data: [DONE]"
    return chunks


def streamed_text(chunks: list[dict[str, Any]], index: int = 0) -> str:
    """The content deltas of choice ``index`` joined back together."""
    return "".join(
        choice["delta"].get("content") or ""
        for chunk in chunks
        for choice in chunk["choices"]
        if choice["index"] == index
    )


def finish_reasons(chunks: list[dict[str, Any]]) -> dict[int, list[str]]:
    """Every non-null ``finish_reason`` seen in the stream, per choice index."""
    seen: dict[int, list[str]] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            if choice.get("finish_reason") is not None:
                seen.setdefault(choice["index"], []).append(choice["finish_reason"])
    return seen


def metric_types(exposition: str) -> dict[str, str]:
    """Family name -> Prometheus type, parsed from a ``/metrics`` text exposition."""
    return {family.name: family.type for family in text_string_to_metric_families(exposition)}


def sample_value(exposition: str, sample: str, model: str) -> float:
    """The value of one sample (e.g. ``vllm:prompt_tokens_total``) labelled with ``model``."""
    for family in text_string_to_metric_families(exposition):
        for item in family.samples:
            if item.name == sample and item.labels.get("model_name") == model:
                return float(item.value)
    raise AssertionError(f"no {sample}{{model_name={model!r}}} sample in /metrics")
