"""A lean HTTP/1.1 keep-alive transport for the engine client (httpx's transport seam).

Why not httpx's default: its connection pool re-checks every pooled connection (a readability
poll per socket through anyio's attribute machinery) each time a request is assigned or released,
so at 64 concurrent engine calls the gateway spent more CPU in pool bookkeeping than in proxying
(docs/benchmarks.md has the profile). Engines are few, local and speak plain HTTP/1.1, so this
transport keeps a LIFO stack of idle connections per origin, parses answers with ``httptools``
(already installed with ``uvicorn[standard]``) and never scans.

It honours httpx's timeouts (``connect``, ``read`` between bytes, ``write``) and raises httpx's
own exceptions, so the ``httpx.AsyncClient`` API and the error translation in ``upstream`` are
unchanged. A connection is reused only after its answer was read to the end with keep-alive; a
response closed early (a client that went away) closes its socket, which makes the engine abort
the request.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator

import httptools
import httpx

READ_SIZE = 65536
Origin = tuple[bytes, bytes, int]


class _Connection:
    """One socket to an engine and the parser of the answer in progress."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: deque[bytes] = deque()
        self.headers_done = False
        self.complete = False
        self.keep_alive = False
        self.parser = httptools.HttpResponseParser(self)

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.headers_done = True
        self.status = self.parser.get_status_code()
        # Read now: once the message is complete the parser has reset and forgets it.
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True

    def reset(self) -> None:
        self.status = 0
        self.headers = []
        self.body.clear()
        self.headers_done = self.complete = self.keep_alive = False
        self.parser = httptools.HttpResponseParser(self)

    @property
    def reusable(self) -> bool:
        return (
            self.complete
            and self.keep_alive
            and not self.writer.is_closing()
            and not self.reader.at_eof()
        )

    async def feed(self, request: httpx.Request, read_timeout: float | None) -> bool:
        """Read once from the socket into the parser; False at end of file."""
        try:
            async with asyncio.timeout(read_timeout):
                data = await self.reader.read(READ_SIZE)
        except TimeoutError:
            raise httpx.ReadTimeout("the engine sent nothing in time", request=request) from None
        except OSError as exc:
            raise httpx.ReadError(str(exc), request=request) from exc
        if not data:
            return False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            raise httpx.RemoteProtocolError(f"bad HTTP answer: {exc}", request=request) from exc
        return True

    def close(self) -> None:
        self.writer.close()


class _Body(httpx.AsyncByteStream):
    """The answer's body, parsed as the socket delivers it; returns the connection when done."""

    def __init__(
        self, transport: EngineTransport, origin: Origin, conn: _Connection, request: httpx.Request
    ) -> None:
        self.transport = transport
        self.origin = origin
        self.conn = conn
        self.request = request
        self.read_timeout = _timeout(request, "read")
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self.conn
        while True:
            while conn.body:
                yield conn.body.popleft()
            if conn.complete:
                return
            if not await conn.feed(self.request, self.read_timeout):
                # Engines send a length or chunks, so EOF before the end is a cut answer.
                raise httpx.RemoteProtocolError(
                    "the engine closed the connection mid-answer", request=self.request
                )

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.transport.release(self.origin, self.conn)


def _timeout(request: httpx.Request, kind: str) -> float | None:
    timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
    return timeouts.get(kind)


class EngineTransport(httpx.AsyncBaseTransport):
    """Plain-HTTP/1.1 transport with per-origin idle stacks (``http://`` only)."""

    def __init__(self, *, max_idle_per_origin: int = 512) -> None:
        self.max_idle = max_idle_per_origin
        self.idle: dict[Origin, list[_Connection]] = {}
        self.closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http":
            raise httpx.UnsupportedProtocol("the engine transport speaks plain http only")
        origin: Origin = (b"http", url.raw_host, url.port or 80)
        head = self._head(request)
        body = b"".join([part async for part in request.stream])  # type: ignore[union-attr]
        for attempt in range(2):  # a second try only when a reused idle socket was stale
            conn, reused = await self._acquire(origin, request)
            try:
                await self._send(conn, request, head + body)
                while not conn.headers_done:
                    if not await conn.feed(request, _timeout(request, "read")):
                        raise httpx.RemoteProtocolError(
                            "the engine closed the connection without answering", request=request
                        )
            except httpx.RemoteProtocolError:
                conn.close()
                if reused and attempt == 0 and not conn.headers_done:
                    continue  # the engine had dropped the idle connection: use a fresh one
                raise
            except BaseException:
                conn.close()
                raise
            return httpx.Response(
                conn.status,
                headers=conn.headers,
                stream=_Body(self, origin, conn, request),
                extensions={"http_version": b"HTTP/1.1"},
            )
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _head(request: httpx.Request) -> bytes:
        target = request.url.raw_path
        lines = [request.method.encode() + b" " + target + b" HTTP/1.1"]
        lines += [name + b": " + value for name, value in request.headers.raw]
        return b"\r\n".join(lines) + b"\r\n\r\n"

    async def _acquire(self, origin: Origin, request: httpx.Request) -> tuple[_Connection, bool]:
        stack = self.idle.get(origin)
        while stack:
            conn = stack.pop()
            if not conn.writer.is_closing() and not conn.reader.at_eof():
                conn.reset()
                return conn, True
            conn.close()
        try:
            async with asyncio.timeout(_timeout(request, "connect")):
                reader, writer = await asyncio.open_connection(
                    origin[1].decode("ascii"), origin[2], limit=READ_SIZE * 4
                )
        except TimeoutError:
            raise httpx.ConnectTimeout(
                "connecting to the engine timed out", request=request
            ) from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc), request=request) from exc
        return _Connection(reader, writer), False

    async def _send(self, conn: _Connection, request: httpx.Request, data: bytes) -> None:
        conn.writer.write(data)
        try:
            async with asyncio.timeout(_timeout(request, "write")):
                await conn.writer.drain()
        except TimeoutError:
            raise httpx.WriteTimeout("writing to the engine timed out", request=request) from None
        except OSError as exc:
            # A reused connection the engine already closed fails here or at the first read.
            raise httpx.RemoteProtocolError(str(exc), request=request) from exc

    def release(self, origin: Origin, conn: _Connection) -> None:
        """Keep a fully read keep-alive connection for the next call; close anything else."""
        stack = self.idle.setdefault(origin, [])
        if not self.closed and conn.reusable and len(stack) < self.max_idle:
            stack.append(conn)
        else:
            conn.close()

    async def aclose(self) -> None:
        self.closed = True
        for stack in self.idle.values():
            for conn in stack:
                conn.close()
        self.idle.clear()
