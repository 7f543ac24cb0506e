"""The streamed rehearsed answer: progress comments, then the committed turn as real chunks.

While the planner runs, the client sees SSE comment lines (``: rehearsing 2/4``) — one as soon as
the request is accepted, one per imagined observation, and a keep-alive when nothing else happened
for a while — so proxies keep the connection open and a person watching sees progress. Then:

- the committed turn, decided and verified before any of it is sent, written as vLLM would
  stream it (``ChunkWriter.turn_chunks``) — so a fallback after bytes went out cannot happen;

and finally the usage chunk (all tokens, when ``stream_options.include_usage``) and
``data: [DONE]``. The ``rehearsal`` summary rides on the usage chunk when there is one, else on
the chunk that carries the finish reason — never on a chunk of its own, because only the usage
chunk may have empty ``choices`` (``ChunkWriter`` in ``server/rehearse/committed.py``). A client
that disconnects cancels the planner, and with it every engine call of the rehearsal.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
from typing import Any

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..errors import GatewayError, sse_error_event
from ..rehearse.committed import ChunkWriter, fingerprint, with_minted_ids
from ..rehearse.service import RehearsalRun
from .relay import SSE_HEADERS, ClientDisconnected, until_disconnect
from .state import OUTCOME_STATE_KEY, REHEARSAL_STATE_KEY

KEEPALIVE_S = 2.0
_END = object()


def sse(chunk: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


class RehearsingStream(Response, abc.ABC):
    """An SSE answer produced while a rehearsal runs: the chat and the Responses streams.

    Sends the SSE head with ``X-Rehearsal-Id``, then the body a subclass's ``serve`` writes; a
    client gone mid-way ends it quietly (``until_disconnect`` cancels the work), and however it
    ends, the outcome and the rehearsal summary are written back to the request's state for
    its log line and metrics (``server/http/accounting.py``).
    """

    def __init__(self, rehearsal_id: str) -> None:
        # Response.__init__ is skipped on purpose: the body is produced while rehearsing.
        self.rehearsal_id = rehearsal_id
        self.status_code = 200
        self.background = None
        self.outcome = "ok"
        self.summary: dict[str, Any] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [*SSE_HEADERS, (b"x-rehearsal-id", self.rehearsal_id.encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        try:
            with contextlib.suppress(ClientDisconnected):
                await until_disconnect(scope, receive, self.serve(send))
        finally:
            state = scope.setdefault("state", {})
            state[OUTCOME_STATE_KEY] = self.outcome
            state[REHEARSAL_STATE_KEY] = self.summary

    @abc.abstractmethod
    async def serve(self, send: Send) -> None:
        """Write the body, ending with a last ``http.response.body``; set outcome and summary."""


class RehearsalResponse(RehearsingStream):
    """The chat completion's rehearsed stream: progress, then the committed turn's chunks."""

    def __init__(self, rehearsal: RehearsalRun) -> None:
        super().__init__(rehearsal.rehearsal_id)
        self.rehearsal = rehearsal
        self.include_usage = rehearsal.include_usage
        self.writer = ChunkWriter(rehearsal.completion_id, rehearsal.model, rehearsal.created)
        self.frames: asyncio.Queue[bytes | object] = asyncio.Queue()

    async def serve(self, send: Send) -> None:
        producer = asyncio.create_task(self._produce())
        try:
            await self._pump(send)
        finally:
            if not producer.done():
                producer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await producer

    async def _pump(self, send: Send) -> None:
        budget = self.rehearsal.budget
        expected = budget.budget * budget.depth
        shown = -1
        while True:
            done = min(self.rehearsal.imagined_done, expected)
            if done != shown:
                shown = done
                line = f": rehearsing {done}/{expected}\n\n".encode()
                await send({"type": "http.response.body", "body": line, "more_body": True})
            try:
                frame = await asyncio.wait_for(self.frames.get(), timeout=KEEPALIVE_S)
            except TimeoutError:
                keepalive = b": keep-alive\n\n"
                await send({"type": "http.response.body", "body": keepalive, "more_body": True})
                continue
            if frame is _END:
                break
            assert isinstance(frame, bytes)
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _produce(self) -> None:
        """Run the rehearsal and queue every frame of the answer, ending with ``_END``."""
        try:
            result = await self.rehearsal.run()
            turn = with_minted_ids(result.turn)
            summary = self.summary = await self.rehearsal.settle(result, turn)
            closing = {"system_fingerprint": fingerprint(turn), "rehearsal": summary}
            on_finish = {} if self.include_usage else closing
            for chunk in self.writer.turn_chunks(turn, closing=on_finish):
                await self.frames.put(sse(chunk))
            if self.include_usage:
                await self.frames.put(sse(self.writer.usage_chunk(result.usage, **closing)))
            await self.frames.put(b"data: [DONE]\n\n")
            self.outcome = "degraded" if summary["degraded"] else "ok"
        except GatewayError as exc:
            self.outcome = "error"
            await self.frames.put(sse_error_event(exc))
        finally:
            await self.frames.put(_END)
