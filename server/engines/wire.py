"""The default engine transport: HTTP/1.1 on asyncio's sockets, parsed by httptools.

Hand-written because an engine call needs little that a general client does, and a general
client's bookkeeping was the largest single cost of a pass-through: aiohttp's client ran about
a third of the gateway's Python per request (docs/decisions/0104-wire-behind-the-seam.md).

What it does, behind the seam's contract (``server/engines/transport.py``):

- One request per socket at a time; sockets are kept per (scheme, host, port), newest reused
  first, closed once idle for ``keepalive_s`` (one sweep timer while any are idle) or when the
  engine closes them. ``sockets`` caps the sockets open at once across engines: a call beyond it
  waits for one to come back (the caller bounds that wait), an idle socket to another engine is
  closed to make room.
- The connect is bounded by the request's ``connect_s``; https engines use the TLS context given,
  checked against ``server_name`` when the URL holds an address.
- Bodies are bytes both ways. A request carries its headers as given, plus ``host`` (unless
  given) and ``content-length``; a header value with a line break is refused. An answer ends at
  its length, its last chunk, or (neither given) the engine's close. Reading pauses while more
  than ``exchange.BUFFER_BYTES`` wait unread, so a slow reader of a stream holds a bounded buffer.
- An answer ended early (``aclose`` before its end, a cancelled wait, a failure) closes its socket,
  which is how vLLM hears that a request was abandoned; one read to its end goes back to the pool.
- Failures are httpx's exception classes: ``ConnectError``/``ConnectTimeout`` for no connection,
  ``RemoteProtocolError`` for a socket closed before the answer's end or an answer that is not
  HTTP, ``ReadError`` for a reset, ``LocalProtocolError`` for a request it will not send.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from urllib.parse import urlsplit

import httpx

from .exchange import Exchange, Key
from .transport import EngineRequest, EngineResponse
from .transports import SocketBounds

__all__ = ["WireTransport"]


class WireResponse:
    """An answer on one ``Exchange``; its socket goes back to the pool once read to its end."""

    __slots__ = ("_headers", "conn", "owner", "released", "status")

    def __init__(self, conn: Exchange, owner: WireTransport) -> None:
        self.conn = conn
        self.owner = owner
        self.status = conn.status
        self._headers: dict[str, str] | None = None
        self.released = False

    @property
    def headers(self) -> Mapping[str, str]:
        headers = self._headers
        if headers is None:
            headers = {}
            for name, value in self.conn.header_list:
                headers[name] = f"{headers[name]}, {value}" if name in headers else value
            self._headers = headers
        return headers

    async def read(self) -> bytes:
        conn = self.conn
        pieces: list[bytes] = []
        try:
            while True:
                if conn.pieces:
                    pieces.append(conn.take())
                if conn.complete:
                    break
                if conn.failure is not None:
                    raise conn.failure
                await conn.wait()
        except BaseException:
            self.end(early=True)
            raise
        self.end(early=False)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    async def chunks(self) -> AsyncIterator[bytes]:
        conn = self.conn
        try:
            while True:
                if conn.pieces:
                    yield conn.take()
                    continue
                if conn.complete:
                    break
                if conn.failure is not None:
                    raise conn.failure
                await conn.wait()
        except BaseException:
            self.end(early=True)
            raise
        self.end(early=False)

    async def aclose(self) -> None:
        self.end(early=not self.conn.complete)

    def end(self, *, early: bool) -> None:
        if self.released:
            return
        self.released = True
        self.owner.release(self.conn, reuse=not early and not self.conn.closed)


class WireTransport(SocketBounds):
    """Engine calls on keep-alive sockets of its own, capped at ``sockets`` open at once."""

    def __init__(
        self, *, sockets: int = 100, keepalive_s: float = 4.0, tls: ssl.SSLContext | None = None
    ) -> None:
        super().__init__(sockets=sockets, keepalive_s=keepalive_s, tls=tls)
        self.open = 0  # sockets connected or connecting, idle ones included
        self._idle: dict[Key, list[Exchange]] = {}
        self._targets: dict[str, tuple[Key, str, str]] = {}
        self._room: asyncio.Event | None = None  # set when a socket closes or comes back
        self._sweep: asyncio.TimerHandle | None = None
        self._closed = False

    async def send(self, request: EngineRequest) -> EngineResponse:
        key, target, authority = self._targets.get(request.url) or self._parse(request.url)
        head = self._head(request, target, authority)
        conn = await self._acquire(key, request)
        conn.reset()
        if request.body:
            conn.transport.writelines((head, request.body))  # type: ignore[union-attr]
        else:
            conn.transport.write(head)  # type: ignore[union-attr]
        try:
            while not conn.headers_done:
                if conn.failure is not None:
                    raise conn.failure
                await conn.wait()
        except BaseException:
            self.release(conn, reuse=False)  # a cancelled wait: closing is how vLLM hears
            raise
        return WireResponse(conn, self)

    def _parse(self, url: str) -> tuple[Key, str, str]:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise httpx.UnsupportedProtocol(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        parsed = ((parts.scheme, parts.hostname, port), target, parts.netloc)
        if len(self._targets) < 4096:  # engines x routes; a bound against unbounded growth
            self._targets[url] = parsed
        return parsed

    @staticmethod
    def _head(request: EngineRequest, target: str, authority: str) -> bytes:
        host = f"host: {authority}\r\n"
        items = []
        for name, value in request.headers.items():
            lower = name.lower()
            if lower == "host":
                host = ""  # the caller's own (a TLS name for an engine called by address)
            elif lower == "content-length":
                continue  # the transport frames the body
            items.append((name, value))
        lines = "".join(f"{name}: {value}\r\n" for name, value in items)
        if lines.count("\n") != len(items) or lines.count("\r") != len(items):
            raise httpx.LocalProtocolError("a header name or value holds a line break")
        size = f"content-length: {len(request.body)}\r\n" if request.body is not None else ""
        return f"{request.method} {target} HTTP/1.1\r\n{host}{lines}{size}\r\n".encode("latin-1")

    async def _acquire(self, key: Key, request: EngineRequest) -> Exchange:
        while True:
            if self._closed:
                raise httpx.TransportError("the engine transport is closed")
            conn = self._take_idle(key)
            if conn is not None:
                return conn
            if self.open >= self.sockets:
                self._close_one_idle()
            if self.open < self.sockets:
                return await self._connect(key, request)
            if self._room is None:
                self._room = asyncio.Event()
            self._room.clear()
            await self._room.wait()  # the caller's bound ends a wait that lasts too long

    def _take_idle(self, key: Key) -> Exchange | None:
        """The newest idle socket to ``key`` still open and fresh; stale ones are closed."""
        idle = self._idle.get(key)
        oldest = time.monotonic() - self.keepalive_s
        while idle:
            conn = idle.pop()
            if not conn.closed and conn.idle_since >= oldest:
                return conn
            self._drop(conn)
        return None

    def _close_one_idle(self) -> None:
        for idle in self._idle.values():
            if idle:
                self._drop(idle.pop(0))  # the oldest of some other engine's
                return

    async def _connect(self, key: Key, request: EngineRequest) -> Exchange:
        scheme, host, port = key
        self.open += 1
        loop = asyncio.get_running_loop()
        tls = self.tls if scheme == "https" else None
        name = (request.server_name or host) if tls is not None else None
        try:
            async with asyncio.timeout(request.connect_s):
                _, conn = await loop.create_connection(
                    lambda: Exchange(key), host, port, ssl=tls, server_hostname=name
                )
        except BaseException as exc:
            self.open -= 1
            self._signal_room()
            if isinstance(exc, TimeoutError):
                raise httpx.ConnectTimeout(f"no connection to {host}:{port} in time") from None
            if isinstance(exc, OSError | ssl.SSLError):
                raise httpx.ConnectError(f"cannot connect to {host}:{port}: {exc}") from exc
            raise
        return conn

    def release(self, conn: Exchange, *, reuse: bool) -> None:
        """An answer ended: its socket back to the pool, or closed."""
        if reuse and not conn.closed and not self._closed:
            conn.idle_since = time.monotonic()
            self._idle.setdefault(conn.key, []).append(conn)
            if self._sweep is None:
                self._sweep = asyncio.get_running_loop().call_later(self.keepalive_s, self._expire)
            self._signal_room()
        else:
            self._drop(conn)

    def _drop(self, conn: Exchange) -> None:
        conn.close()
        self.open -= 1
        self._signal_room()

    def _signal_room(self) -> None:
        if self._room is not None:
            self._room.set()

    def _expire(self) -> None:
        """Close the sockets idle for ``keepalive_s`` or closed by the engine; look again while
        any are left (one timer for all, so a socket may stay up to twice ``keepalive_s``)."""
        self._sweep = None
        oldest = time.monotonic() - self.keepalive_s
        left = False
        for idle in self._idle.values():
            keep = [conn for conn in idle if not conn.closed and conn.idle_since > oldest]
            for conn in idle:
                if conn not in keep:
                    self._drop(conn)
            idle[:] = keep
            left = left or bool(keep)
        if left:
            self._sweep = asyncio.get_running_loop().call_later(self.keepalive_s, self._expire)

    async def aclose(self) -> None:
        """Close every idle socket; sockets in use close when their answer ends."""
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for idle in self._idle.values():
            for conn in idle:
                self._drop(conn)
        self._idle.clear()
        self._signal_room()
