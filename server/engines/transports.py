"""aiohttp's client behind the engine seam, on its public API (``RGW_ENGINE_TRANSPORT=aiohttp``).

One ``aiohttp.ClientSession`` and its ``TCPConnector``, sized and bounded from the settings: a
cap on open sockets (room for every engine's slots), idle sockets closed after
``RGW_ENGINE_KEEPALIVE_S`` (below vLLM's own 5 s, so the engine never closes a socket the
gateway is about to reuse), the connect bound each request carries, one TLS context for https
engines (``RGW_ENGINE_CA_FILE``), no proxy variables read. aiohttp's failures become httpx's
exception classes here, once (``server/engines/transport.py`` lists them).

Why aiohttp beside the default wire (``server/engines/wire.py``): it is the cheapest maintained
asyncio client we measured, for whoever prefers a maintained client to the wire's CPU saving
(docs/decisions/0104-wire-behind-the-seam.md). ``socket_cap`` and ``tls_context`` serve both.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Self

import aiohttp
import httpx

from ..settings import GatewaySettings
from .transport import EngineRequest, EngineResponse

__all__ = ["AiohttpTransport", "SocketBounds", "socket_cap", "tls_context"]


def socket_cap(settings: GatewaySettings) -> int:
    """The most sockets open to engines at once: every engine's slots, and a few spare each.

    A discovered group may grow, so it has room for a few engines.
    """
    default = settings.engine_max_concurrency
    return sum(
        ((spec.max_concurrency or default) + 4) * (8 if spec.discover else 1)
        for spec in settings.all_engines
    )


def tls_context(settings: GatewaySettings) -> ssl.SSLContext:
    """What https engines are checked against: the system's CAs, or ``RGW_ENGINE_CA_FILE``."""
    return ssl.create_default_context(cafile=settings.engine_ca_file)


class SocketBounds:
    """What every pooled transport is bounded by: a socket cap, idle expiry and one TLS context.

    Both transports take them from the settings the same way (``of``), so the bounds cannot drift
    apart between the default and the selectable one.
    """

    def __init__(
        self, *, sockets: int = 100, keepalive_s: float = 4.0, tls: ssl.SSLContext | None = None
    ) -> None:
        self.sockets = sockets
        self.keepalive_s = keepalive_s
        self.tls = tls or ssl.create_default_context()

    @classmethod
    def of(cls, settings: GatewaySettings) -> Self:
        """A transport bounded as the settings say: the socket cap, keep-alive expiry and TLS."""
        return cls(
            sockets=socket_cap(settings),
            keepalive_s=settings.engine_keepalive_s,
            tls=tls_context(settings),
        )


def _httpx_error(exc: aiohttp.ClientError) -> httpx.TransportError:
    """aiohttp's failure as the httpx exception class the seam speaks."""
    message = str(exc) or type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(message)
    if isinstance(exc, aiohttp.ClientConnectorError):  # refused, unreachable, DNS, TLS
        return httpx.ConnectError(message)
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return httpx.ReadTimeout(message)
    if isinstance(exc, aiohttp.ClientOSError):  # ECONNRESET, EPIPE
        return httpx.ReadError(message)
    if isinstance(exc, aiohttp.ClientConnectionError | aiohttp.ClientPayloadError):
        return httpx.RemoteProtocolError(message)  # closed before the answer's end
    if isinstance(exc, aiohttp.ClientResponseError):
        return httpx.RemoteProtocolError(message)  # an answer that is not HTTP
    return httpx.TransportError(message)


class AiohttpResponse:
    """An ``aiohttp.ClientResponse`` behind the seam."""

    __slots__ = ("_response",)

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    @property
    def status(self) -> int:
        return self._response.status

    @property
    def headers(self) -> Mapping[str, str]:
        return self._response.headers

    async def read(self) -> bytes:
        try:
            return await self._response.read()
        except aiohttp.ClientError as exc:
            self._response.close()
            raise _httpx_error(exc) from exc
        except BaseException:
            self._response.close()  # cancelled mid-answer: the engine hears of it
            raise

    async def chunks(self) -> AsyncIterator[bytes]:
        content = self._response.content
        try:
            while chunk := await content.readany():
                yield chunk
        except aiohttp.ClientError as exc:
            raise _httpx_error(exc) from exc

    async def aclose(self) -> None:
        # Read to its end, the connection is back in the pool already; else it is closed.
        self._response.close()


class AiohttpTransport(SocketBounds):
    """Engine calls on one ``aiohttp.ClientSession``: its pool, parser and TLS."""

    def __init__(
        self, *, sockets: int = 100, keepalive_s: float = 4.0, tls: ssl.SSLContext | None = None
    ) -> None:
        super().__init__(sockets=sockets, keepalive_s=keepalive_s, tls=tls)
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[float | None, aiohttp.ClientTimeout] = {}

    def _open(self) -> aiohttp.ClientSession:
        """The session, made on first use: aiohttp wants it made inside the running loop."""
        connector = aiohttp.TCPConnector(
            limit=self.sockets, limit_per_host=0, keepalive_timeout=self.keepalive_s, ssl=self.tls
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            trust_env=False,  # proxy variables never reroute a call to an engine
            auto_decompress=False,  # bytes are relayed as the engine sent them
            skip_auto_headers=("Accept-Encoding", "User-Agent"),
        )
        return self._session

    def _timeout(self, connect_s: float | None) -> aiohttp.ClientTimeout:
        # Only the socket connect: aiohttp's ``connect`` bounds "a pooled connection or a new
        # socket" as one and raises what an unreachable engine raises, so a wait for a busy
        # engine's connection would read as a dead engine. The caller bounds that wait.
        timeout = self._timeouts.get(connect_s)
        if timeout is None:
            timeout = self._timeouts[connect_s] = aiohttp.ClientTimeout(sock_connect=connect_s)
        return timeout

    async def send(self, request: EngineRequest) -> EngineResponse:
        session = self._session or self._open()
        try:
            response = await session.request(
                request.method, request.url, data=request.body, headers=request.headers,
                allow_redirects=False, timeout=self._timeout(request.connect_s),
                server_hostname=request.server_name,
            )  # fmt: skip
        except aiohttp.ClientError as exc:
            raise _httpx_error(exc) from exc
        return AiohttpResponse(response)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
