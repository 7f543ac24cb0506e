"""The gateway is a drop-in for the engine: the official SDK sees the same answers through it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from tests.server.conftest import FAST_HEALTH, TWIN_MODEL, metric_value
from tests.support import inprocess
from tests.support.inprocess import InProcessGateway
from tests.support.procs import Proc, cli_argv, free_port, start_http_server

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Local time in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
]
MESSAGES: list[Any] = [
    {"role": "system", "content": "You are a helpful assistant with tools."},
    {"role": "user", "content": "What is the weather in Paris?"},
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Proc | InProcessGateway]]:
    """Two identical twins and a gateway in front of both (shared by this module)."""
    logs = tmp_path_factory.mktemp("chat")
    procs: list[Proc | InProcessGateway] = []
    try:
        for name in ("twin_a", "twin_b"):
            port = free_port()
            procs.append(
                start_http_server(
                    cli_argv("twin", "--port", str(port), "--seed", "1"),
                    port=port,
                    log_path=logs / f"{name}.log",
                )
            )
        argv = ["--alias", "envace=" + TWIN_MODEL]
        for twin in procs:
            argv += ["--engine", twin.url + "/v1"]
        procs.append(inprocess.start_gateway(argv, log_path=logs / "gateway.log", env=FAST_HEALTH))
        yield {"twin": procs[0], "twin_b": procs[1], "gateway": procs[2]}
    finally:
        for proc in procs:
            proc.stop()


_CLIENTS: dict[str, openai.OpenAI] = {}


def sdk(proc: Proc) -> openai.OpenAI:
    """One SDK client per server, closed with the module's stack (``_close_clients``)."""
    url = proc.url + "/v1"
    if url not in _CLIENTS:
        _CLIENTS[url] = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
    return _CLIENTS[url]


@pytest.fixture(scope="module", autouse=True)
def _close_clients() -> Iterator[None]:
    """An unclosed client's pooled socket warns when collected, failing a later test."""
    yield
    for client in _CLIENTS.values():
        client.close()
    _CLIENTS.clear()


def async_sdk(proc: Proc) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=proc.url + "/v1", api_key="unused", max_retries=0)


def comparable(completion: Any) -> dict[str, Any]:
    """A completion without what differs per call: ids, timestamps, prefix-cache hits."""
    data: dict[str, Any] = completion.model_dump()
    data.pop("id")
    data.pop("created")
    if data.get("usage"):
        data["usage"].pop("prompt_tokens_details", None)
    for choice in data["choices"]:
        for call in choice["message"].get("tool_calls") or []:
            call.pop("id")
    return data


def reassemble(chunks: list[Any]) -> dict[str, Any]:
    """The message a stream of SDK chunks spells out, one entry per tool call index."""
    message: dict[str, Any] = {"content": "", "reasoning": "", "tool_calls": {}, "finish": None}
    for item in chunks:
        for choice in item.choices:
            delta = choice.delta.model_dump()
            message["content"] += delta.get("content") or ""
            message["reasoning"] += delta.get("reasoning") or ""
            for call in delta.get("tool_calls") or []:
                slot = message["tool_calls"].setdefault(call["index"], {"name": "", "args": ""})
                function = call.get("function") or {}
                slot["name"] += function.get("name") or ""
                slot["args"] += function.get("arguments") or ""
            message["finish"] = choice.finish_reason or message["finish"]
    return message


def test_sync_non_stream_equals_engine(stack: dict[str, Proc]) -> None:
    """For one seed, the gateway's non-streamed answer is the engine's, tool call included."""
    kwargs: dict[str, Any] = {"model": TWIN_MODEL, "messages": MESSAGES, "tools": TOOLS, "seed": 7}
    direct = sdk(stack["twin"]).chat.completions.create(**kwargs)
    through = sdk(stack["gateway"]).chat.completions.create(**kwargs)
    assert through.choices[0].finish_reason == "tool_calls"
    assert through.choices[0].message.tool_calls
    assert comparable(through) == comparable(direct)


async def test_async_non_stream_equals_engine(stack: dict[str, Proc]) -> None:
    """The async SDK gets the engine's answer through the gateway too, reasoning included."""
    kwargs: dict[str, Any] = {"model": TWIN_MODEL, "messages": MESSAGES, "tools": TOOLS, "seed": 11}
    async with async_sdk(stack["twin"]) as direct_client, async_sdk(stack["gateway"]) as gateway:
        direct = await direct_client.chat.completions.create(**kwargs)
        through = await gateway.chat.completions.create(**kwargs)
    assert comparable(through) == comparable(direct)
    assert through.choices[0].message.model_dump().get("reasoning")


def test_sync_stream_reassembles_to_the_same_message(stack: dict[str, Proc]) -> None:
    """Streamed chunks through the gateway spell out the engine's streamed and whole message."""
    kwargs: dict[str, Any] = {"model": TWIN_MODEL, "messages": MESSAGES, "tools": TOOLS, "seed": 5}
    direct = list(sdk(stack["twin"]).chat.completions.create(stream=True, **kwargs))
    through = list(sdk(stack["gateway"]).chat.completions.create(stream=True, **kwargs))
    whole = sdk(stack["gateway"]).chat.completions.create(**kwargs).choices[0]
    assert reassemble(through) == reassemble(direct)
    message = reassemble(through)
    assert message["finish"] == whole.finish_reason == "tool_calls"
    assert whole.message.tool_calls
    assert [(c["name"], c["args"]) for c in message["tool_calls"].values()] == [
        (call.function.name, call.function.arguments) for call in whole.message.tool_calls
    ]
    assert message["reasoning"] == whole.message.model_dump()["reasoning"]


async def test_async_stream_honours_include_usage(stack: dict[str, Proc]) -> None:
    """``stream_options.include_usage`` brings the engine's final usage chunk through."""
    kwargs: dict[str, Any] = {
        "model": TWIN_MODEL,
        "messages": MESSAGES,
        "tools": TOOLS,
        "seed": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with async_sdk(stack["twin"]) as direct_client, async_sdk(stack["gateway"]) as gateway:
        direct = [chunk async for chunk in await direct_client.chat.completions.create(**kwargs)]
        through = [chunk async for chunk in await gateway.chat.completions.create(**kwargs)]
    assert through[-1].usage is not None
    assert direct[-1].usage is not None
    assert through[-1].usage.completion_tokens == direct[-1].usage.completion_tokens
    assert through[-1].usage.prompt_tokens == direct[-1].usage.prompt_tokens
    assert reassemble(through) == reassemble(direct)


def test_stream_bytes_are_relayed_verbatim(stack: dict[str, Proc]) -> None:
    """The SSE bytes (framing, ``[DONE]``) equal the engine's once ids and timestamps are masked."""
    body = {"model": TWIN_MODEL, "messages": MESSAGES, "tools": TOOLS, "seed": 9, "stream": True}

    def sse(proc: Proc) -> bytes:
        response = httpx.post(proc.url + "/v1/chat/completions", json=body, timeout=30)
        assert response.headers["content-type"].startswith("text/event-stream")
        masked = re.sub(rb'"(id|created)":\s*("[^"]*"|\d+)', rb'"\1":_', response.content)
        return masked

    through = sse(stack["gateway"])
    assert through == sse(stack["twin"])
    assert through.endswith(b"data: [DONE]\n\n")


def test_alias_and_models_list(stack: dict[str, Proc]) -> None:
    """``/v1/models`` lists the served model and the alias; the alias answers like the model."""
    ids = [model.id for model in sdk(stack["gateway"]).models.list().data]
    assert ids == [TWIN_MODEL, "envace"]
    engine_card = httpx.get(stack["twin"].url + "/v1/models").json()["data"][0]
    served, alias = httpx.get(stack["gateway"].url + "/v1/models").json()["data"]
    # Relayed untouched (max_model_len, root, parent, permission, …); ``created`` is the time of
    # the engine's answer, which vLLM stamps per request.
    assert {**served, "created": 0} == {**engine_card, "created": 0}
    assert alias == {**served, "id": "envace", "parent": TWIN_MODEL}
    kwargs: dict[str, Any] = {"messages": MESSAGES, "tools": TOOLS, "seed": 2}
    by_alias = sdk(stack["gateway"]).chat.completions.create(model="envace", **kwargs)
    direct = sdk(stack["twin"]).chat.completions.create(model=TWIN_MODEL, **kwargs)
    assert comparable(by_alias) == comparable(direct)


def test_health_ready_and_metrics(stack: dict[str, Proc]) -> None:
    """``/health`` is alive, ``/ready`` reports both engines, ``/metrics`` counts chat requests."""
    gateway = stack["gateway"].url
    assert httpx.get(gateway + "/health").json() == {"status": "ok"}
    ready = httpx.get(gateway + "/ready").json()
    assert ready["status"] == "ready"
    assert ready["checks"]["engines"]["detail"] == "2/2 healthy"
    text = httpx.get(gateway + "/metrics").text
    assert 'rehearsal_gateway_requests_total{mode="passthrough",outcome="ok"}' in text
    assert "rehearsal_gateway_engine_healthy{" in text


def test_unknown_fields_reach_the_engine_byte_for_byte(start_double, start_gateway) -> None:
    """vLLM extras, vendor fields and message extras arrive at the engine exactly as sent."""
    echo = start_double("echo")
    gateway = start_gateway(echo.url + "/v1")
    sent = orjson.dumps(
        {
            "model": "double-model",
            "messages": [
                {"role": "user", "content": "hi", "x_note": [1, 2.5, None]},
                {
                    "role": "assistant",
                    "content": "",
                    "reasoning_content": "old-style thinking",
                    "reasoning": "new-style thinking",
                },
                {"role": "user", "content": "again"},
            ],
            "top_k": 20,
            "min_p": 0.05,
            "repetition_penalty": 1.1,
            "chat_template_kwargs": {"enable_thinking": True},
            "structured_outputs": {"choice": ["a", "b"]},
            "vendor_extension": {"nested": {"keep": "me"}},
        }
    )
    response = httpx.post(
        gateway.url + "/v1/chat/completions",
        content=sent,
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"].encode() == sent


def test_alias_rewrites_only_the_model(start_double, start_gateway) -> None:
    """Asking for an alias sends the engine the same request with its served model name."""
    echo = start_double("echo", model="served-name")
    gateway = start_gateway(echo.url + "/v1", args=("--alias", "public=served-name"))
    sent = {"model": "public", "messages": [{"role": "user", "content": "hi"}], "top_k": 3}
    response = httpx.post(gateway.url + "/v1/chat/completions", json=sent)
    received = orjson.loads(response.json()["choices"][0]["message"]["content"])
    assert received == {**sent, "model": "served-name"}


def test_continuous_usage_stats_count_a_streams_tokens_once(start_double, start_gateway) -> None:
    """With vLLM's per-chunk cumulative usage, pass-through tokens are the stream's total, once."""
    engine = start_double("usage")
    gateway = start_gateway(engine.url + "/v1")
    body = {"model": "double-model", "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}  # fmt: skip
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert list(response.iter_lines())[-2:] == ["data: [DONE]", ""]
    tokens = "rehearsal_gateway_tokens_total"
    assert metric_value(gateway.url, tokens, role="passthrough", kind="prompt") == 10
    assert metric_value(gateway.url, tokens, role="passthrough", kind="completion") == 3
