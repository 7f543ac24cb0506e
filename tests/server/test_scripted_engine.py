"""The gateway over real HTTP on loopback with a scripted engine (server/engines/testing.py).

The fake replaces the network to the engines and nothing else, so each test runs the production
stack above the seam: uvicorn with the gateway's protocol, the one ASGI stack, the chat service,
rehearsal, the engine client's framing and accounting.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from rehearsal_gateway.server.engines.testing import (
    ScriptedTransport,
    about,
    completion,
    failure,
    imagined,
    streamed,
    tool_call,
)
from tests.support import inprocess
from tests.support.inprocess import InProcessGateway

MODEL = "scripted-model"
ORDER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_order",
        "description": "Look an order up by its id.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
        },
    },
}
# Two candidates, every distinct action imagined (no early exit on agreement).
REHEARSE_TWO = {"mode": "parallel", "budget": 2, "commit": "select", "early_exit": False}


@pytest.fixture
def engine() -> ScriptedTransport:
    return ScriptedTransport(models=(MODEL,))


@pytest.fixture
def gateway(tmp_path: Path, engine: ScriptedTransport) -> Iterator[InProcessGateway]:
    started = inprocess.start_gateway(
        ["--engine", "http://engine.invalid/v1"],
        log_path=tmp_path / "gateway.log",
        engine_transport=engine,
    )
    try:
        yield started
    finally:
        started.stop()


def sdk(gateway: InProcessGateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=30)


def test_a_pass_through_chat_reaches_the_fake_and_its_answer_the_client(
    gateway: InProcessGateway, engine: ScriptedTransport
) -> None:
    """A plain chat goes through the seam once, its body as sent; the scripted answer comes back."""
    engine.enqueue(completion("Hello from the script"), role="passthrough")
    answer = sdk(gateway).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}]
    )
    assert answer.choices[0].message.content == "Hello from the script"
    assert answer.usage is not None
    assert answer.usage.total_tokens == 15
    [body] = engine.bodies()
    assert body["model"] == MODEL
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert engine.requests[0].url == "http://engine.invalid/v1/chat/completions"
    assert engine.pending == 0


def test_a_stream_arrives_event_by_event(
    gateway: InProcessGateway, engine: ScriptedTransport
) -> None:
    """A streamed chat relays each scripted event, in order, to the SDK's stream."""
    engine.enqueue(streamed("Hel", "lo", "!"))
    stream = sdk(gateway).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
    )
    pieces = [chunk.choices[0].delta.content for chunk in stream if chunk.choices]
    assert "".join(piece or "" for piece in pieces) == "Hello!"
    assert engine.bodies()[0]["stream"] is True


def test_a_rehearsed_chat_acts_imagines_and_commits_one_call(
    gateway: InProcessGateway, engine: ScriptedTransport
) -> None:
    """Rehearsal: two candidates of one action, one imagination of it, one committed call."""
    call = tool_call("get_order", {"order_id": "#W1"})
    engine.enqueue(completion(call, call), role="act")
    engine.enqueue(imagined({"status": "pending"}), role="rehearse", match=about("get_order"))
    answer = sdk(gateway).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Where is order #W1?"}],
        tools=[ORDER_TOOL],  # type: ignore[list-item]
        extra_body={"rehearsal": REHEARSE_TWO},
    )
    [committed] = answer.choices[0].message.tool_calls or []
    assert committed.function.name == "get_order"
    assert answer.choices[0].finish_reason == "tool_calls"
    assert len(engine.bodies("act")) == 1
    assert len(engine.bodies("rehearse")) == 1
    assert engine.pending == 0


def test_a_scripted_engine_failure_reaches_the_client_as_an_openai_error(
    gateway: InProcessGateway, engine: ScriptedTransport
) -> None:
    """An engine's error answer, scripted behind the seam, comes back in the OpenAI envelope."""
    engine.enqueue(failure(400, "This model's maximum context length is 8 tokens"))
    with pytest.raises(openai.BadRequestError) as raised:
        sdk(gateway).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}]
        )
    assert "maximum context length" in raised.value.message
    assert engine.pending == 0
