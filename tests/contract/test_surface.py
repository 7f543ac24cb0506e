"""Contract: the routes the gateway relays, in vLLM 0.32's shapes, on the twin and on real vLLM.

``/version``, ``/tokenize``, ``/detokenize``, legacy ``/v1/completions`` (whole and streamed),
the Anthropic-style ``/v1/messages`` (whole and streamed) and ``/v1/messages/count_tokens``, and
``/v1/responses`` without and with function tools, whole and as its event stream. The key sets
below were read off a real vLLM 0.32 CPU server; each test runs on both engines, so the twin
cannot drift from them unseen. Values a random tiny model makes up are not compared, only where
they sit and what type they have.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.contract.conftest import Engine
from tests.contract.wire import THINKING_OFF, WEATHER_TOOL, forced_tool_call_extra

COMPLETION_KEYS = {"id", "object", "created", "model", "choices", "service_tier",
                   "system_fingerprint", "usage", "kv_transfer_params", "ec_transfer_params",
                   "metrics"}  # fmt: skip
COMPLETION_CHOICE_KEYS = {"index", "text", "logprobs", "finish_reason", "stop_reason",
                          "token_ids", "prompt_logprobs", "prompt_token_ids",
                          "routed_experts"}  # fmt: skip
STREAM_CHOICE_KEYS = {"index", "text", "logprobs", "finish_reason", "stop_reason",
                      "prompt_token_ids", "token_ids"}  # fmt: skip
RESPONSE_KEYS = {
    "id", "created_at", "incomplete_details", "instructions", "metadata", "model", "object",
    "output", "parallel_tool_calls", "temperature", "tool_choice", "tools", "top_p", "background",
    "max_output_tokens", "max_tool_calls", "previous_response_id", "prompt", "reasoning",
    "service_tier", "status", "text", "top_logprobs", "truncation", "usage", "user",
    "presence_penalty", "frequency_penalty", "kv_transfer_params", "ec_transfer_params",
    "input_messages", "output_messages",
}  # fmt: skip
FUNCTION_CALL_KEYS = {"arguments", "call_id", "name", "type", "id", "async", "caller",
                      "namespace", "status"}  # fmt: skip
ECHOED_TOOL_KEYS = {"name", "parameters", "strict", "type", "allowed_callers", "async",
                    "defer_loading", "description", "output_schema"}  # fmt: skip
MESSAGE_ITEM_KEYS = {"id", "content", "role", "status", "type", "phase"}
OUTPUT_TEXT_KEYS = {"annotations", "text", "type", "logprobs"}
RESPONSE_USAGE = {
    "input_tokens": {"cached_tokens", "cache_write_tokens", "input_tokens_per_turn",
                     "cached_tokens_per_turn"},
    "output_tokens": {"reasoning_tokens", "tool_output_tokens", "output_tokens_per_turn",
                      "tool_output_tokens_per_turn"},
}  # fmt: skip
# Every event's keys, by type, as vLLM streams a Responses answer.
EVENT_KEYS = {
    "response.created": {"response", "sequence_number", "type"},
    "response.in_progress": {"response", "sequence_number", "type"},
    "response.output_item.added": {"item", "output_index", "sequence_number", "type"},
    "response.output_item.done": {"item", "output_index", "sequence_number", "type"},
    "response.function_call_arguments.delta": {"delta", "item_id", "output_index",
                                               "sequence_number", "type"},
    "response.function_call_arguments.done": {"arguments", "item_id", "name", "output_index",
                                              "sequence_number", "type"},
    "response.content_part.added": {"content_index", "item_id", "output_index", "part",
                                    "sequence_number", "type"},
    "response.content_part.done": {"content_index", "item_id", "output_index", "part",
                                   "sequence_number", "type"},
    "response.output_text.delta": {"content_index", "delta", "item_id", "logprobs",
                                   "output_index", "sequence_number", "type"},
    "response.output_text.done": {"content_index", "item_id", "logprobs", "output_index",
                                  "sequence_number", "text", "type"},
    "response.completed": {"response", "sequence_number", "type"},
}  # fmt: skip
MESSAGES_USAGE_KEYS = {"input_tokens", "output_tokens", "cache_creation_input_tokens",
                       "cache_read_input_tokens"}  # fmt: skip
RESPONSES_TOOL = {"type": "function", **WEATHER_TOOL["function"]}


def events(http: httpx.Client, path: str, body: dict[str, Any]) -> list[tuple[str | None, Any]]:
    """POST a streaming request; its SSE events as ``(event name or None, decoded data)``."""
    out: list[tuple[str | None, Any]] = []
    name: str | None = None
    with http.stream("POST", path, json={**body, "stream": True}) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data = line.removeprefix("data: ")
                out.append((name, data if data == "[DONE]" else json.loads(data)))
                name = None
            else:
                assert not line, f"not an SSE line: {line!r}"
    return out


def test_version(engine: Engine, http: httpx.Client) -> None:
    answer = http.get("/version").json()
    assert set(answer) == {"version"}
    assert answer["version"].startswith("0.32")


@pytest.mark.parametrize(
    "asked",
    [pytest.param({"prompt": "hello world"}, id="prompt"),
     pytest.param({"messages": [{"role": "user", "content": "hi"}]}, id="messages")],
)  # fmt: skip
def test_tokenize_then_detokenize(
    engine: Engine, http: httpx.Client, asked: dict[str, Any]
) -> None:
    """``/tokenize`` counts and lists ids; ``/detokenize`` turns a prompt's ids back into it."""
    tokens = http.post("/tokenize", json={"model": engine.model, **asked}).json()
    assert set(tokens) == {"count", "max_model_len", "tokens", "token_strs"}
    assert tokens["count"] == len(tokens["tokens"]) > 0
    assert isinstance(tokens["max_model_len"], int)
    assert tokens["token_strs"] is None
    if "prompt" in asked:
        back = http.post("/detokenize", json={"model": engine.model, "tokens": tokens["tokens"]})
        assert back.json() == {"prompt": asked["prompt"]}


def test_completions(engine: Engine, http: httpx.Client) -> None:
    body = {"model": engine.model, "prompt": "hello", "max_tokens": 4, "seed": 1}
    answer = http.post("/v1/completions", json=body).json()
    assert set(answer) == COMPLETION_KEYS
    assert answer["object"] == "text_completion"
    assert answer["system_fingerprint"].startswith("vllm-")
    (choice,) = answer["choices"]
    assert set(choice) == COMPLETION_CHOICE_KEYS
    assert choice["finish_reason"] == "length"
    assert isinstance(choice["text"], str)
    assert answer["usage"]["completion_tokens"] == 4
    assert set(answer["usage"]["prompt_tokens_details"]) == {
        "cached_tokens", "created_cache_tokens", "multimodal_tokens"}  # fmt: skip


@pytest.mark.parametrize("usage", [False, True], ids=["no-usage", "include-usage"])
def test_completions_stream(engine: Engine, http: httpx.Client, usage: bool) -> None:
    """Text pieces, the finish reason on the last only; the fingerprint on the closing chunk."""
    body: dict[str, Any] = {"model": engine.model, "prompt": "hello", "max_tokens": 4, "seed": 1}
    if usage:
        body["stream_options"] = {"include_usage": True}
    seen = events(http, "/v1/completions", body)
    assert [name for name, _ in seen] == [None] * len(seen)
    assert seen[-1][1] == "[DONE]"
    chunks = [data for _, data in seen[:-1]]
    if usage:
        last = chunks.pop()
        assert last["choices"] == []
        assert set(last) == {"id", "object", "created", "model", "choices", "usage",
                             "system_fingerprint"}  # fmt: skip
        assert last["usage"]["completion_tokens"] == 4
    finishes = [c["choices"][0]["finish_reason"] for c in chunks]
    assert finishes == [None] * (len(chunks) - 1) + ["length"]
    for at, chunk in enumerate(chunks):
        assert set(chunk["choices"][0]) == STREAM_CHOICE_KEYS
        closing = at == len(chunks) - 1 and not usage
        assert ("system_fingerprint" in chunk) == closing, chunk


def test_messages(engine: Engine, http: httpx.Client) -> None:
    """The Anthropic Messages answer: content blocks, Anthropic stop reason and usage names."""
    body = {"model": engine.model, "max_tokens": 4, "system": "Be brief.",
            "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    answer = http.post("/v1/messages", json=body).json()
    assert set(answer) == {"id", "type", "role", "content", "model", "stop_reason", "usage"}
    assert (answer["type"], answer["role"], answer["stop_reason"]) == (
        "message", "assistant", "max_tokens")  # fmt: skip
    assert set(answer["usage"]) == MESSAGES_USAGE_KEYS
    assert answer["usage"]["output_tokens"] == 4
    assert answer["content"]
    for block in answer["content"]:
        keys = {"thinking": {"type", "thinking", "signature"}, "text": {"type", "text"}}
        assert set(block) == keys[block["type"]]


def test_messages_stream(engine: Engine, http: httpx.Client) -> None:
    """Anthropic's event stream: start, each block's start/deltas/stop, delta, stop; no [DONE]."""
    body = {"model": engine.model, "max_tokens": 4,
            "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    seen = events(http, "/v1/messages", body)
    assert all(name == data["type"] for name, data in seen)
    kinds = [name for name, _ in seen]
    assert (kinds[0], kinds[-2], kinds[-1]) == ("message_start", "message_delta", "message_stop")
    started = seen[0][1]["message"]
    assert set(started) == {"id", "type", "role", "content", "model", "stop_reason",
                            "stop_sequence", "usage"}  # fmt: skip
    assert set(started["usage"]) == {"input_tokens", "output_tokens"}
    delta = seen[-2][1]
    assert delta["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert set(delta["usage"]) == MESSAGES_USAGE_KEYS
    blocks = kinds[1:-2]
    assert blocks
    assert blocks[0] == "content_block_start"
    assert blocks[-1] == "content_block_stop"
    assert set(blocks) == {"content_block_start", "content_block_delta", "content_block_stop"}
    for _, data in seen[1:-2]:
        assert set(data) == ({"type", "index"} | ({"content_block"} if data["type"] ==
                             "content_block_start" else {"delta"} if data["type"] ==
                             "content_block_delta" else set()))  # fmt: skip


def test_messages_count_tokens(engine: Engine, http: httpx.Client) -> None:
    body = {"model": engine.model, "messages": [{"role": "user", "content": "hi"}]}
    answer = http.post("/v1/messages/count_tokens", json=body).json()
    assert answer == {
        "input_tokens": answer["input_tokens"],
        "context_management": {"original_input_tokens": answer["input_tokens"]},
    }
    assert answer["input_tokens"] > 0  # fmt: skip


def test_messages_without_max_tokens_is_a_400(engine: Engine, http: httpx.Client) -> None:
    body = {"model": engine.model, "messages": [{"role": "user", "content": "hi"}]}
    answer = http.post("/v1/messages", json=body)
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "body.max_tokens"


def _check_response(response: dict[str, Any]) -> None:
    assert set(response) == RESPONSE_KEYS
    assert response["object"] == "response"
    for field, details in RESPONSE_USAGE.items():
        assert set(response["usage"][f"{field}_details"]) == details
    assert response["usage"]["total_tokens"] == (
        response["usage"]["input_tokens"] + response["usage"]["output_tokens"])  # fmt: skip


def test_responses_text(engine: Engine, http: httpx.Client) -> None:
    """Without tools: one message item, cut by max_output_tokens as ``incomplete``."""
    body = {"model": engine.model, "input": "hi", "max_output_tokens": 3,
            "presence_penalty": 0.5, **THINKING_OFF}  # fmt: skip
    response = http.post("/v1/responses", json=body).json()
    _check_response(response)
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert (response["presence_penalty"], response["frequency_penalty"]) == (0.5, 0.0)
    (item,) = response["output"]
    assert set(item) == MESSAGE_ITEM_KEYS
    assert [set(part) for part in item["content"]] == [OUTPUT_TEXT_KEYS]


def test_responses_function_call(engine: Engine, http: httpx.Client) -> None:
    """With a function tool: a function_call item, the tool echoed with every field."""
    body = {"model": engine.model, "input": "What is the weather in Paris?",
            "tools": [RESPONSES_TOOL], "max_output_tokens": 200,
            **forced_tool_call_extra()}  # fmt: skip
    response = http.post("/v1/responses", json=body).json()
    _check_response(response)
    assert response["status"] == "completed"
    calls = [item for item in response["output"] if item["type"] == "function_call"]
    assert len(calls) == 1
    assert set(calls[0]) == FUNCTION_CALL_KEYS
    assert calls[0]["name"] == "get_weather"
    assert isinstance(json.loads(calls[0]["arguments"])["city"], str)
    (tool,) = response["tools"]
    assert set(tool) == ECHOED_TOOL_KEYS
    assert tool["parameters"] == RESPONSES_TOOL["parameters"]


def _event_sequence(seen: list[tuple[str | None, Any]]) -> list[str]:
    kinds = [data["type"] for _, data in seen]
    assert [name for name, _ in seen] == kinds  # ``event:`` names each data line
    assert [data["sequence_number"] for _, data in seen] == list(range(len(seen)))
    for _, data in seen:
        assert set(data) == EVENT_KEYS[data["type"]], data["type"]
    collapsed: list[str] = []
    for kind in kinds:  # a run of deltas counts once: their number is the model's
        if not (collapsed and kind == collapsed[-1] and kind.endswith(".delta")):
            collapsed.append(kind)
    return collapsed


def test_responses_stream_with_a_function_call(engine: Engine, http: httpx.Client) -> None:
    body = {"model": engine.model, "input": "What is the weather in Paris?",
            "tools": [RESPONSES_TOOL], "max_output_tokens": 200,
            **forced_tool_call_extra()}  # fmt: skip
    seen = events(http, "/v1/responses", body)
    assert _event_sequence(seen) == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed",
    ]  # fmt: skip
    data = [d for _, d in seen]
    assert data[0]["response"]["status"] == "in_progress"
    added, done = data[2]["item"], data[-2]["item"]
    assert set(added) == set(done) == FUNCTION_CALL_KEYS
    assert (added["arguments"], added["status"], done["status"]) == ("", "in_progress",
                                                                     "completed")  # fmt: skip
    deltas = "".join(d["delta"] for d in data if d["type"].endswith("arguments.delta"))
    assert deltas == done["arguments"] == data[-3]["arguments"]
    _check_response(data[-1]["response"])
    assert data[-1]["response"]["output"][0]["call_id"] == done["call_id"]


def test_responses_stream_of_text(engine: Engine, http: httpx.Client) -> None:
    body = {"model": engine.model, "input": "hi", "max_output_tokens": 6, **THINKING_OFF}
    seen = events(http, "/v1/responses", body)
    assert _event_sequence(seen) == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.completed",
    ]  # fmt: skip
    data = [d for _, d in seen]
    assert data[2]["item"]["content"] == []
    assert data[3]["part"] == {"annotations": [], "text": "", "type": "output_text",
                               "logprobs": []}  # fmt: skip
    text = "".join(d["delta"] for d in data if d["type"] == "response.output_text.delta")
    assert text == data[-4]["text"] == data[-3]["part"]["text"]
    assert data[-3]["part"]["logprobs"] is None
    _check_response(data[-1]["response"])


@pytest.mark.parametrize("how", ["follow-up", "get"])
def test_an_unstored_response_is_a_404(engine: Engine, http: httpx.Client, how: str) -> None:
    """vLLM keeps no responses unless its store is on: a follow-up or a read names none."""
    if how == "get":
        answer = http.get("/v1/responses/resp_nope")
    else:
        body = {"model": engine.model, "input": "and then?", "max_output_tokens": 3,
                "previous_response_id": "resp_nope", **THINKING_OFF}  # fmt: skip
        answer = http.post("/v1/responses", json=body)
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert (error["message"], error["type"], error["param"]) == (
        "Response with id 'resp_nope' not found.",
        "invalid_request_error",
        "response_id",
    )
