"""The gateway in front of a real vLLM (CPU build, tiny random Qwen3): the SDK sees vLLM's answers.

The random model writes no meaningful call on its own, so the requests force the text of one with
``structured_outputs`` and let vLLM's real hermes parser produce ``tool_calls``
(tests/contract/wire.py explains the trick).
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.contract.wire import USER_ASKS, WEATHER_TOOL, forced_tool_call_extra
from tests.server.test_chat import comparable, reassemble
from tests.support.procs import Proc
from tests.support.vllm import SERVED_MODEL_NAME

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(300)]


def request(seed: int) -> dict[str, Any]:
    return {
        "model": SERVED_MODEL_NAME,
        "messages": USER_ASKS,
        "tools": [WEATHER_TOOL],
        "seed": seed,
        "max_tokens": 64,
        "extra_body": forced_tool_call_extra(),
    }


def client(proc: Proc) -> openai.OpenAI:
    return openai.OpenAI(base_url=proc.url + "/v1", api_key="x", max_retries=0, timeout=120)


def test_tool_call_through_gateway_equals_vllm(vllm_engine: Proc, vllm_gateway: Proc) -> None:
    """Sync SDK, non-stream and stream: the gateway's tool call is vLLM's, chunk for chunk."""
    with client(vllm_engine) as engine, client(vllm_gateway) as gateway:
        direct = engine.chat.completions.create(**request(4))
        through = gateway.chat.completions.create(**request(4))
        assert through.choices[0].finish_reason == "tool_calls"
        assert comparable(through) == comparable(direct)
        streamed_direct = list(engine.chat.completions.create(stream=True, **request(4)))
        streamed = list(gateway.chat.completions.create(stream=True, **request(4)))
    assert reassemble(streamed) == reassemble(streamed_direct)
    assert reassemble(streamed)["finish"] == "tool_calls"


async def test_async_sdk_and_free_text_through_gateway(
    vllm_engine: Proc, vllm_gateway: Proc
) -> None:
    """Async SDK with a seeded free-text answer (reasoning on): the same text as vLLM's."""
    body: dict[str, Any] = {
        "model": SERVED_MODEL_NAME,
        "messages": [{"role": "user", "content": "Say hello."}],
        "seed": 17,
        "max_tokens": 24,
        "stream_options": {"include_usage": True},
    }
    async with (
        openai.AsyncOpenAI(base_url=vllm_engine.url + "/v1", api_key="x", max_retries=0) as a,
        openai.AsyncOpenAI(base_url=vllm_gateway.url + "/v1", api_key="x", max_retries=0) as b,
    ):
        direct = [c async for c in await a.chat.completions.create(stream=True, **body)]
        through = [c async for c in await b.chat.completions.create(stream=True, **body)]
    assert reassemble(through) == reassemble(direct)
    assert through[-1].usage is not None
    assert direct[-1].usage is not None
    assert through[-1].usage.completion_tokens == direct[-1].usage.completion_tokens
