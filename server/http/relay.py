"""Getting answers to the client: SSE relay, JSON answers, and cancellation on disconnect.

Uvicorn does not stop an app whose client went away (its ``send`` silently drops the bytes), so
the work in progress — the engine call or the stream relay — is cancelled when the connection is
lost, which closes the upstream connection and makes the engine abort the request. The
gateway's own uvicorn protocol says so through the request's ``ClientGone``
(``server/http/client_gone.py``); under any other server a watcher task reads ``receive``
for ``http.disconnect``.

A stream is relayed chunk by chunk as the engine's socket delivers it, with no re-framing: the
engine's SSE bytes, ``data: [DONE]`` included, are the client's SSE bytes (the engine client hands
over whole events only). If the engine breaks after the first byte — a cut connection, a stream
ended without ``[DONE]``, silence past ``RGW_CHUNK_TIMEOUT``, an engine that stopped answering, or
the stream outrunning ``RGW_REQUEST_TIMEOUT`` — the client gets one SSE error event, on a line of
its own, and ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..chat_call import JsonAnswer
from ..engines.calls import StreamAnswer
from ..engines.streams import DONE
from ..errors import EngineError, EngineTimeout, sse_error_event
from .client_gone import CLIENT_GONE_KEY

T = TypeVar("T")

SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


class ClientDisconnected(Exception):
    """The client closed the connection before the answer was ready."""


async def _watch_disconnect(receive: Receive, target: asyncio.Task[object]) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            target.cancel()
            return


async def until_disconnect(scope: Scope, receive: Receive, work: Coroutine[Any, Any, T]) -> T:
    """Await ``work``; if the client disconnects first, cancel it and raise ClientDisconnected."""
    current = asyncio.current_task()
    assert current is not None  # always inside a request task
    gone = scope.get(CLIENT_GONE_KEY)
    if gone is None:
        return await _watching_receive(receive, work, current)
    if gone.fired:
        work.close()
        raise ClientDisconnected
    gone.cancel_on_fire(current)
    try:
        return await work
    except asyncio.CancelledError:
        if gone.fired:
            current.uncancel()
            raise ClientDisconnected from None
        raise
    finally:
        gone.forget(current)


async def _watching_receive(
    receive: Receive, work: Coroutine[Any, Any, T], current: asyncio.Task[Any]
) -> T:
    watcher = asyncio.get_running_loop().create_task(_watch_disconnect(receive, current))
    try:
        return await work
    except asyncio.CancelledError:
        if watcher.done() and not watcher.cancelled():
            current.uncancel()
            raise ClientDisconnected from None
        raise
    finally:
        watcher.cancel()


JSON_TYPE = (b"content-type", b"application/json")


class WholeAnswer(Response):
    """A complete answer as a Starlette response, its body bytes untouched, its head built once.

    ``Response.__init__`` renders the content and lowers, encodes and searches the headers for a
    length and a type (~130 Python opcodes per pass-through); here the body is bytes already
    and the answer's own headers (``x-rehearsal-*``) never carry either.
    """

    def __init__(self, answer: JsonAnswer) -> None:
        self.status_code = answer.status
        self.background = None
        self.body = answer.body
        self.raw_headers = answer_head(answer)


def answer_head(answer: JsonAnswer) -> list[tuple[bytes, bytes]]:
    """A complete answer's headers: its type and length, then its own (``x-rehearsal-*``)."""
    status, body = answer.status, answer.body
    head = [JSON_TYPE]
    if status >= 200 and status not in (204, 304):
        head.append((b"content-length", str(len(body)).encode()))
    for name, value in answer.headers.items():
        head.append((name.lower().encode("latin-1"), value.encode("latin-1")))
    return head


def json_response(answer: JsonAnswer) -> Response:
    """A complete answer as a Starlette response (body bytes untouched)."""
    return WholeAnswer(answer)


class StreamRelay(Response):
    """An ASGI response that relays an open engine stream to the client."""

    def __init__(self, answer: StreamAnswer) -> None:
        # Response.__init__ is skipped on purpose: there is no body to render.
        self.answer = answer
        self.status_code = 200
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            with contextlib.suppress(ClientDisconnected):
                await until_disconnect(scope, receive, self.pump(send))
        finally:
            await self.answer.close()

    async def pump(self, send: Send) -> None:
        headers = SSE_HEADERS + [
            (name.encode("latin-1"), value.encode("latin-1"))
            for name, value in self.answer.headers.items()
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        stream = self.answer.stream
        last = stream.first
        await send({"type": "http.response.body", "body": last, "more_body": True})
        error: EngineError | None = None
        try:
            async with asyncio.timeout_at(self.answer.deadline):
                async for chunk in stream.rest():
                    last = chunk
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except EngineError as exc:
            error = exc
        except TimeoutError:
            error = EngineTimeout("the stream ran past the gateway's overall bound for a request")
        if error is not None and not last.endswith(DONE):  # after [DONE] the answer is whole
            await send(
                {"type": "http.response.body", "body": sse_error_event(error), "more_body": True}
            )
        await send({"type": "http.response.body", "body": b"", "more_body": False})
