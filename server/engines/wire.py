"""Whole answers from plain-HTTP engines: asyncio's transports and httptools' parser, no more.

Why this exists beside aiohttp. Issue 16 asks pass-through to cost at most 1.5x vllm-router's CPU
(the Rust router, on the agent body). A Python opcode count (``python -m benchmarks.opcodes``,
200 agent pass-throughs, 2026-12-03) put aiohttp's client at 3,430 of the gateway's 10,055
opcodes per request: URL objects, header multidicts, the request and response wrappers, the
payload writer, the stream reader, the connector's bookkeeping. ``perf`` on the same load put
71% of the gateway's CPU in the interpreter itself, so those opcodes are CPU. No maintained
client is cheaper per call from asyncio: bare aiohttp is what we had; pyreqwest (Rust) crosses
to tokio's threads on every call and saved 0.04 ms at one call at a time (docs/benchmarks.md).
What a whole answer from a plain-HTTP engine needs is small: one keep-alive socket, one write of
the request, httptools (the parser uvicorn serves with, a dependency already) to find the end of
the answer. That is this module: 10,055 -> 6,769 opcodes per agent pass-through, and with the
cuts beside it gateway CPU x0.65-0.73 of the tree before (docs/benchmarks.md, "Fifth pass").

What it does and does not do:
- ``http://`` engines only; TLS engines, streams and probes stay on httpx over aiohttp
  (``server/engines/client.py``).
- Sockets are kept per (host, port), newest first, and dropped once idle for ``keepalive_s`` or
  closed by the engine. There is no cap of its own on open sockets: every call holds an engine
  slot (``server/engines/pool.py``), which bounds them.
- Failures are httpx's exceptions, so ``server/engines/faults.py`` reads them as it reads the
  other transports': a refused or timed-out connect is ``ConnectError``/``ConnectTimeout``; a
  socket closed or reset before the answer's end, and an answer the parser rejects, is
  ``RemoteProtocolError`` (a reset: the caller may retry on a fresh socket).
- A call cancelled while it waits (its deadline, a hung engine, the client gone) closes its
  socket, which is how vLLM learns to abort the request.
- An answer without a length or chunks ends when the engine closes the socket.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

import httptools
import httpx

__all__ = ["Wire"]

_CLOSED_EARLY = "the engine closed the connection before the answer ended"


class _Exchange(asyncio.Protocol):
    """One socket to an engine: sends a request, parses its answer, may be used again."""

    __slots__ = (
        "chunks",
        "closed",
        "complete",
        "content_type",
        "framed",
        "idle_since",
        "parser",
        "status",
        "transport",
        "waiter",
    )  # fmt: skip

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[None] | None = None
        self.status = 0
        self.content_type = ""
        self.chunks: list[bytes] = []
        self.framed = False  # the answer has a length or chunks (else the close ends it)
        self.complete = False
        self.closed = False
        self.idle_since = 0.0

    # asyncio's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(httpx.RemoteProtocolError(f"the engine's answer is not HTTP: {exc}"))
            self._close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        if self.status and not self.framed:
            waiter.set_result(None)  # an answer delimited by the close
        else:
            self._fail(httpx.RemoteProtocolError(_CLOSED_EARLY))

    # httptools' side

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-type":
            self.content_type = value.decode("latin-1")
        elif name == b"content-length" or name == b"transfer-encoding":
            self.framed = True

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        self.complete = True
        if not self.parser.should_keep_alive():
            self._close()
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ours

    def _fail(self, exc: Exception) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    async def exchange(self, request: bytes, payload: bytes | None) -> tuple[int, str, bytes]:
        """Send one request; (status, content type, body) of its answer."""
        assert self.transport is not None
        self.status, self.content_type, self.chunks = 0, "", []
        self.framed = self.complete = False
        self.waiter = asyncio.get_running_loop().create_future()
        if payload:
            self.transport.writelines((request, payload))
        else:
            self.transport.write(request)
        try:
            await self.waiter
        except BaseException:
            self._close()  # a cancelled wait: closing is how the engine hears of it
            raise
        finally:
            self.waiter = None
        if not self.complete:
            self.closed = True
        chunks = self.chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return self.status, self.content_type or "application/json", body


class Wire:
    """Keep-alive sockets to plain-HTTP engines, for whole (non-streamed) answers."""

    def __init__(self, connect_timeout: float, keepalive_s: float) -> None:
        self.connect_timeout = connect_timeout
        self.keepalive_s = keepalive_s
        self._idle: dict[tuple[str, int], list[_Exchange]] = {}
        self._heads: dict[tuple[str, int], str] = {}
        self._sweep: asyncio.TimerHandle | None = None

    async def request(
        self,
        host: str,
        port: int,
        authority: str,
        method: str,
        target: str,
        headers: Mapping[str, str],
        payload: bytes | None,
    ) -> tuple[int, str, bytes]:
        """(status, content type, body) of one call to ``host:port`` (``authority``: its Host)."""
        key = (host, port)
        lines = "\r\n".join(map(": ".join, headers.items())) + "\r\n" if headers else ""  # in C
        if lines.count("\n") != len(headers) or lines.count("\r") != len(headers):
            raise httpx.LocalProtocolError("a header value holds a line break")
        size = f"content-length: {len(payload)}\r\n" if payload is not None else ""
        head = self._heads.get(key) or self._head(key, authority)
        request = f"{method} {target} HTTP/1.1\r\n{head}{lines}{size}\r\n".encode("latin-1")
        conn = self._take(key) or await self._open(host, port)
        status, content_type, body = await conn.exchange(request, payload)
        if conn.closed:
            conn._close()
        else:
            conn.idle_since = time.monotonic()
            self._idle.setdefault(key, []).append(conn)
            if self._sweep is None:
                self._sweep = asyncio.get_running_loop().call_later(self.keepalive_s, self._expire)
        return status, content_type, body

    def _expire(self) -> None:
        """Close the sockets idle for ``keepalive_s`` or more; look again while any are left.

        One timer for all the sockets, armed only while some are idle, so a socket may stay up
        to twice ``keepalive_s`` (a timer per call would cost every call)."""
        self._sweep = None
        oldest = time.monotonic() - self.keepalive_s
        left = False
        for idle in self._idle.values():
            keep = [conn for conn in idle if not conn.closed and conn.idle_since > oldest]
            for conn in idle:
                if conn not in keep:
                    conn._close()
            idle[:] = keep
            left = left or bool(keep)
        if left:
            self._sweep = asyncio.get_running_loop().call_later(self.keepalive_s, self._expire)

    def _head(self, key: tuple[str, int], authority: str) -> str:
        head = f"host: {authority}\r\naccept-encoding: identity\r\n"
        self._heads[key] = head
        return head

    def _take(self, key: tuple[str, int]) -> _Exchange | None:
        """The newest idle socket still open and fresh; older stale ones are closed."""
        idle = self._idle.get(key)
        if not idle:
            return None
        oldest = time.monotonic() - self.keepalive_s
        while idle:
            conn = idle.pop()
            if not conn.closed and conn.idle_since >= oldest:
                return conn
            conn._close()
        return None

    async def _open(self, host: str, port: int) -> _Exchange:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(_Exchange, host, port)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"no connection to {host}:{port} in time") from None
        except OSError as exc:
            raise httpx.ConnectError(f"cannot connect to {host}:{port}: {exc}") from exc
        return conn

    def close(self) -> None:
        """Close every idle socket (sockets in use close when their call ends)."""
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for idle in self._idle.values():
            for conn in idle:
                conn._close()
        self._idle.clear()
