"""The streamed reflect commit (``LiveCommit``): relayed live, folded back, failures surfaced.

The engine side is a fake of our own ``ChatService.open_engine_stream`` seam: it hands over SSE
bytes exactly as an engine sends them, split at awkward places.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from rehearsal.errors import GeneratorError
from rehearsal.messages import GenerationRequest
from server.rehearse.committed import ChunkWriter
from server.rehearse.engine_port import EngineGenerator, LiveCommit


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return _event({"id": "x", "object": "chat.completion.chunk", "choices": [choice]})


@dataclass
class _Stream:
    parts: list[bytes]

    @property
    def first(self) -> bytes:
        return self.parts[0]

    async def rest(self) -> AsyncIterator[bytes]:
        for part in self.parts[1:]:
            yield part


@dataclass
class _Answer:
    stream: _Stream
    closed: bool = False

    async def close(self) -> None:
        self.closed = True


@dataclass
class _Chat:
    body: bytes
    answers: list[_Answer] = field(default_factory=list)

    async def open_engine_stream(self, payload: bytes, **_: Any) -> _Answer:
        # Split the engine's bytes mid-event, as a socket may.
        cut = len(self.body) // 3
        answer = _Answer(_Stream([self.body[:cut], self.body[cut:]]))
        self.answers.append(answer)
        return answer


async def _run(body: bytes) -> tuple[LiveCommit, list[dict[str, Any]], Any, _Chat]:
    sent: list[dict[str, Any]] = []

    async def emit(chunk: dict[str, Any]) -> None:
        sent.append(chunk)

    chat = _Chat(body)
    live = LiveCommit(ChunkWriter("chatcmpl-ours", "public-model", 1), emit)
    generator = EngineGenerator(
        chat,  # type: ignore[arg-type]
        model="m", affinity=b"a", on_call=lambda role, seconds: None, live=live,
    )  # fmt: skip
    request = GenerationRequest(role="commit", messages=({"role": "user", "content": "hi"},))
    try:
        response = await generator.generate(request)
    except GeneratorError as exc:
        response = exc
    return live, sent, response, chat


async def test_live_commit_relays_and_folds_the_turn_with_minted_ids() -> None:
    """Chunks reach the client as they come, under our id, and fold into the committed turn."""
    body = b"".join([
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"reasoning": "look it up"}),
        _chunk({"tool_calls": [{"index": 0, "id": "chatcmpl-tool-1", "type": "function",
                                "function": {"name": "get_order"}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"order_id": '}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"W1"}'}}]}),
        _chunk({}, "tool_calls"),
        _event({"id": "x", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 5}}),
        b"data: [DONE]\n\n",
    ])  # fmt: skip
    live, sent, response, chat = await _run(body)
    assert live.finished
    assert chat.answers[0].closed
    (turn,) = response.choices
    assert turn.reasoning == "look it up"
    (call,) = turn.tool_calls
    assert (call.name, call.arguments) == ("get_order", '{"order_id": "W1"}')
    assert call.id.startswith("call_")
    assert all(
        chunk["id"] == "chatcmpl-ours" and chunk["model"] == "public-model" for chunk in sent
    )
    deltas = [chunk["choices"][0]["delta"] for chunk in sent]
    streamed_ids = [
        piece["id"] for d in deltas for piece in d.get("tool_calls", []) if "id" in piece
    ]
    assert streamed_ids == [call.id]
    assert response.usage.prompt == 7


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param(_event({"error": {"message": "engine died", "code": 500}}), id="error-event"),
        pytest.param(b"", id="no-finish-reason"),
    ],
)
async def test_live_commit_surfaces_a_broken_stream(tail: bytes) -> None:
    """An error event, or a stream that ends without a finish reason, is a failed commit."""
    body = _chunk({"role": "assistant", "content": "Let me "}) + tail + b"data: [DONE]\n\n"
    live, _, response, chat = await _run(body)
    assert isinstance(response, GeneratorError)
    assert live.started
    assert not live.finished
    assert chat.answers[0].closed
