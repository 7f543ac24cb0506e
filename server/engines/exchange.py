"""One socket of the wire transport: an HTTP/1.1 exchange parsed by httptools as it arrives.

``Exchange`` is the asyncio protocol of one keep-alive socket to an engine
(``server/engines/wire.py`` pools them). It writes nothing itself: the transport writes the
request, and the exchange collects the answer's status, headers and body pieces from
httptools' callbacks and wakes the one reader waiting on it. A failure is kept as the httpx
exception the seam speaks (``server/engines/transport.py``) and raised to that reader.
"""

from __future__ import annotations

import asyncio

import httptools
import httpx

__all__ = ["BUFFER_BYTES", "Exchange", "Key"]

BUFFER_BYTES = 1 << 20  # unread answer bytes held before the socket stops being read
CLOSED_EARLY = "the engine closed the connection before the answer ended"
Key = tuple[str, str, int]  # scheme, host, port


class Exchange(asyncio.Protocol):
    """One socket to an engine: one request at a time, its answer parsed as it arrives."""

    __slots__ = (
        "buffered",
        "closed",
        "complete",
        "failure",
        "framed",
        "header_list",
        "headers_done",
        "idle_since",
        "key",
        "parser",
        "paused",
        "pieces",
        "status",
        "transport",
        "wake",
    )  # fmt: skip

    def __init__(self, key: Key) -> None:
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.wake: asyncio.Future[None] | None = None
        self.closed = False
        self.idle_since = 0.0
        self.reset()

    def reset(self) -> None:
        self.status = 0
        self.header_list: list[tuple[str, str]] = []
        self.pieces: list[bytes] = []
        self.buffered = 0
        self.paused = False
        self.framed = False  # a length or chunks: else the engine's close ends the answer
        self.headers_done = self.complete = False
        self.failure: Exception | None = None

    # asyncio's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.fail(httpx.RemoteProtocolError(f"the engine's answer is not HTTP: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.complete or self.failure is not None:
            return
        if self.headers_done and not self.framed:
            self.complete = True  # an answer delimited by the close
            self.notify()
        elif isinstance(exc, ConnectionResetError):
            self.fail(httpx.ReadError(f"the engine reset the connection: {exc}"))
        else:
            self.fail(httpx.RemoteProtocolError(CLOSED_EARLY))

    # httptools' side

    def on_header(self, name: bytes, value: bytes) -> None:
        lower = name.decode("latin-1").lower()
        if lower in ("content-length", "transfer-encoding"):
            self.framed = True
        self.header_list.append((lower, value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.headers_done = True
        self.notify()

    def on_body(self, body: bytes) -> None:
        self.pieces.append(body)
        self.buffered += len(body)
        if self.buffered > BUFFER_BYTES and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self.notify()

    def on_message_complete(self) -> None:
        self.complete = True
        if not self.parser.should_keep_alive():
            self.close()
        self.notify()

    # ours

    def notify(self) -> None:
        wake = self.wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def fail(self, exc: Exception) -> None:
        if self.failure is None:
            self.failure = exc
        self.notify()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    async def wait(self) -> None:
        """Until the parser has news (headers, body, the end) or the socket fails."""
        self.wake = asyncio.get_running_loop().create_future()
        try:
            await self.wake
        finally:
            self.wake = None
        if self.failure is not None:
            raise self.failure

    def take(self) -> bytes:
        """The body bytes that arrived and were not yet taken; reading resumes if it paused."""
        pieces, self.pieces, self.buffered = self.pieces, [], 0
        if self.paused and self.transport is not None and not self.closed:
            self.paused = False
            self.transport.resume_reading()
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)
