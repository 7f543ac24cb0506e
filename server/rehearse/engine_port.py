"""The rehearsal core's ``Generator`` port, implemented over the gateway's engines.

``EngineGenerator`` turns one ``GenerationRequest`` into one engine call through the chat service
(so rehearsal calls get the same routing, retries, limits and timeouts as pass-through), reads the
answer with the core's own reader, and translates every engine failure into ``GeneratorError``
once, here. All calls of one rehearsal share the request's affinity key, so they land on the
engine that already holds the conversation's prefix in its cache.

``LiveCommit`` is the streamed ``reflect`` commit: when the planner makes its final acting call,
the call is streamed from the engine and relayed to the client chunk by chunk as it arrives,
while the same chunks are folded back into the turn the planner receives.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from rehearsal.errors import GeneratorError, MalformedResponse
from rehearsal.messages import (
    AssistantTurn,
    GenerationRequest,
    GenerationResponse,
    ToolCall,
    Usage,
    from_openai_response,
)
from server.errors import EngineError
from server.rehearse.committed import ChunkWriter, mint_tool_call_id
from server.settings import Role

if TYPE_CHECKING:
    from server.chat.service import ChatService

CallObserver = Callable[[str, float], None]
Emit = Callable[[dict[str, Any]], Awaitable[None]]


def pool_role(role: str) -> Role:
    """The engine role that serves a core role: commits are acting calls."""
    return "rehearse" if role == "rehearse" else "act"


class EngineGenerator:
    """One rehearsal's view of the engines (``rehearsal.ports.Generator``)."""

    def __init__(
        self,
        chat: ChatService,
        *,
        model: str | None,
        affinity: bytes,
        on_call: CallObserver,
        live: LiveCommit | None = None,
    ) -> None:
        self.chat = chat
        self.model = model
        self.affinity = affinity
        self.on_call = on_call
        self.live = live

    def payload(self, request: GenerationRequest, **extra: Any) -> bytes:
        return orjson.dumps({"model": self.model, **request.to_openai_body(), **extra})

    async def generate(self, request: GenerationRequest) -> GenerationResponse:
        if self.live is not None and request.role == "commit":
            return await self.live.run(self, request)
        started = time.perf_counter()
        try:
            raw = await self.chat.call_engine(
                self.payload(request),
                role=pool_role(request.role),
                model=self.model,
                affinity=self.affinity,
                label=request.role,
            )
        except EngineError as exc:
            message = f"{request.role} call failed: {exc.message}"
            raise GeneratorError(message, role=request.role) from exc
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise MalformedResponse("the engine answered with invalid JSON") from None
        response = from_openai_response(body)
        self.on_call(request.role, time.perf_counter() - started)
        return response


async def sse_data(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The ``data:`` payloads of an SSE byte stream, however its bytes were split."""
    buffer = first
    chunks = rest.__aiter__()
    while True:
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            for line in event.splitlines():
                if line.startswith(b"data:"):
                    yield line[5:].strip()
        try:
            buffer += await anext(chunks)
        except StopAsyncIteration:
            break
    for line in buffer.splitlines():
        if line.startswith(b"data:"):
            yield line[5:].strip()


@dataclass
class _CallParts:
    id: str
    name: str = ""
    arguments: str = ""


@dataclass
class TurnAccumulator:
    """Folds streamed deltas of choice 0 back into one assistant turn."""

    content: str = ""
    reasoning: str = ""
    finish: str | None = None
    usage: Usage = field(default_factory=Usage)
    calls: dict[int, _CallParts] = field(default_factory=dict)

    def add(self, chunk: dict[str, Any]) -> None:
        if isinstance(chunk.get("usage"), dict):
            self.usage = Usage.from_openai(chunk["usage"])
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            self.content += delta.get("content") or ""
            self.reasoning += delta.get("reasoning") or delta.get("reasoning_content") or ""
            for piece in delta.get("tool_calls") or ():
                self._add_call_piece(piece)
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]

    def _add_call_piece(self, piece: dict[str, Any]) -> None:
        index = piece.get("index", 0)
        if index not in self.calls:
            self.calls[index] = _CallParts(id=mint_tool_call_id())
            piece["id"] = self.calls[index].id  # the client sees our id from the first piece
        elif "id" in piece:
            piece["id"] = self.calls[index].id
        function = piece.get("function") or {}
        self.calls[index].name += function.get("name") or ""
        self.calls[index].arguments += function.get("arguments") or ""

    def turn(self) -> AssistantTurn:
        calls = tuple(
            ToolCall(parts.id, parts.name, parts.arguments)
            for _, parts in sorted(self.calls.items())
        )
        return AssistantTurn(
            content=self.content or None,
            reasoning=self.reasoning or None,
            tool_calls=calls,
            finish_reason=self.finish,
        )


@dataclass
class LiveCommit:
    """Streams the planner's ``reflect`` call to the client while it is generated."""

    writer: ChunkWriter
    emit: Emit
    started: bool = False  # some chunk reached the client
    finished: bool = False  # the whole committed turn reached the client

    async def run(
        self, generator: EngineGenerator, request: GenerationRequest
    ) -> GenerationResponse:
        began = time.perf_counter()
        payload = generator.payload(request, stream=True, stream_options={"include_usage": True})
        try:
            answer = await generator.chat.open_engine_stream(
                payload,
                role=pool_role(request.role),
                model=generator.model,
                affinity=generator.affinity,
                label=request.role,
            )
        except EngineError as exc:
            raise GeneratorError(f"commit stream failed: {exc.message}", role="commit") from exc
        folded = TurnAccumulator()
        try:
            async for data in sse_data(answer.stream.first, answer.stream.rest()):
                if data == b"[DONE]" or not data:
                    continue
                chunk = orjson.loads(data)
                if not isinstance(chunk, dict):
                    continue
                if "error" in chunk:  # vLLM reports a failure mid-stream as an error event
                    raise GeneratorError(f"commit stream failed: {chunk['error']}", role="commit")
                folded.add(chunk)
                if chunk.get("choices"):
                    self.started = True
                    for choice in chunk["choices"]:
                        await self.emit(self.writer.chunk(choice.get("delta") or {},
                                                          choice.get("finish_reason")))  # fmt: skip
        except (EngineError, orjson.JSONDecodeError) as exc:
            raise GeneratorError(f"commit stream broke: {exc}", role="commit") from exc
        finally:
            await answer.close()
        if folded.finish is None:
            raise GeneratorError("the commit stream ended without a finish reason", role="commit")
        self.finished = True
        generator.on_call(request.role, time.perf_counter() - began)
        return GenerationResponse((folded.turn(),), folded.usage)
