"""HTTP calls to one engine: the app's single ``httpx.AsyncClient`` and the aiohttp pool under it.

``engine_http_client`` builds that client: httpx's API over aiohttp's connection pool and
parser (``httpx_aiohttp``), for http and https engines alike. Measured against the hand-written
transport it replaced (``python -m benchmarks.gateway_cpu --transports``, docs/benchmarks.md),
it costs 1.07-1.10x that one's gateway CPU per pass-through request and 1.01-1.14x per rehearsed
one over two runs, inside the 15% we allowed a maintained library, where httpx's default
transport costs 1.6-1.7x; and it closes idle sockets, reopens one the engine closed, reads
close-delimited answers and speaks TLS, which the hand-written one did not.

A whole (non-streamed) answer skips httpx's layer: ``chat`` sends on the ``aiohttp.ClientSession``
the transport holds (same pool, limits and TLS context) and returns the engine's bytes untouched;
aiohttp's failures are raised as httpx's by httpx_aiohttp's own ``map_aiohttp_exceptions``, so
retries and ``translate`` read them as before. Why: httpx's Request/Response objects and URL and
header merging were most of the call's CPU (py-spy, 3,000 pass-through requests: the call took 269
of the gateway's 1,539 busy samples before, 100 of 1,276 after); gateway CPU per pass-through
request went 1.20 -> 1.07 ms and per K=4 rehearsal 4.90 -> 3.77 ms (``benchmarks.gateway_cpu``),
its ratio to vllm-router's 3.5-4.5x -> 2.3-2.8x (docs/benchmarks.md). Streams and probes keep
httpx's API; so does every call with another transport (``benchmarks/transports.py``).

This is the adapter boundary: every httpx exception and every non-2xx answer becomes an
``EngineError`` here (``server/errors.py`` draws the tree), and each failure is counted once in
``rehearsal_gateway_engine_errors_total``. Bodies are moved as bytes: a request goes out as the
bytes the caller gives, a non-streamed answer comes back as the engine's bytes, and a stream is
handed over as whole SSE events, as the socket delivers them (a read that ends mid-event keeps
its tail for the next one, so a stream cut mid-event never shows the client half an event).

Every wait is bounded (``Waits``): a whole non-streamed answer by the call's bound; a stream's
first chunk by ``first_byte``, then each later chunk by ``chunk`` (aiohttp's per-read timeout,
re-armed after the first chunk). A call waiting on an engine registers its task with the engine
(``Engine.watch``), so a hung engine's calls are aborted as soon as its probes say so
(``server/engines/pool.py``). A connection reset or closed before any byte of the answer (a
keep-alive socket the engine closed as it was reused, the ECONNRESET and EOF races alike) is
retried once on a fresh connection before it counts as the engine's failure.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport
from httpx_aiohttp.transport import map_aiohttp_exceptions

from server.engines.engine import JSON, call_headers, model_cards, model_ids, queue_depth
from server.engines.faults import (
    PASSTHROUGH_ROLE,
    count_usage,
    from_status,
    hung,
    is_reset,
    malformed,
    translate,
)
from server.engines.pool import Engine, Probe
from server.engines.streams import CHAT_PATH, DONE_PATHS, SSE_STARTS, EngineStream, split_events
from server.engines.wire import Wire
from server.errors import EngineError, EngineFailed, EngineTimeout
from server.settings import GatewaySettings
from server.telemetry.logs import note_engine
from server.telemetry.metrics import GatewayMetrics
from server.telemetry.waits import deadline, waiting

__all__ = ["CHAT_PATH", "EngineClient", "EngineStream", "Waits", "call_headers"]

T = TypeVar("T")
RESET_RETRIES = 3  # sends that may meet a reset socket before the call counts as failed


@dataclass(frozen=True, slots=True)
class Waits:
    """How long an engine call may wait (seconds), from the ``RGW_*`` settings."""

    first_byte: float = 60.0
    chunk: float = 30.0
    request: float = 600.0

    @classmethod
    def of(cls, settings: GatewaySettings) -> Waits:
        return cls(settings.first_byte_timeout, settings.chunk_timeout, settings.request_timeout)


def engine_http_client(
    settings: GatewaySettings, transport: httpx.AsyncBaseTransport | None = None
) -> httpx.AsyncClient:
    """The one client to every engine, with explicit timeouts and connection limits."""
    default = settings.engine_max_concurrency
    # A discovered group may grow: room for a few engines each.
    connections = sum(
        ((spec.max_concurrency or default) + 4) * (8 if spec.discover else 1)
        for spec in settings.engines
    )
    limits = httpx.Limits(
        max_connections=connections,
        max_keepalive_connections=connections,
        keepalive_expiry=settings.engine_keepalive_s,
    )
    verify: ssl.SSLContext | bool = True
    if settings.engine_ca_file:
        verify = ssl.create_default_context(cafile=settings.engine_ca_file)
    return httpx.AsyncClient(
        timeout=httpx.Timeout(
            connect=settings.connect_timeout,
            read=settings.chunk_timeout,
            write=settings.write_timeout,
            pool=settings.queue_timeout,
        ),
        transport=transport or AiohttpTransport(verify=verify, trust_env=False, limits=limits),
        # Relay bytes as the engine sends them; never let proxy variables reroute loopback.
        headers={"accept-encoding": "identity"},
        trust_env=False,
    )


def _aiohttp_protocol(response: httpx.Response) -> Any:
    """aiohttp's connection protocol under an httpx_aiohttp response (None with other transports).

    httpx_aiohttp exposes no per-read timeout after the request; the protocol's public
    ``read_timeout`` setter is aiohttp's own way to change it on an open response.
    """
    stream = getattr(response.stream, "_stream", response.stream)
    inner = getattr(stream, "_aiohttp_response", None)
    connection = getattr(inner, "connection", None)
    return getattr(connection, "protocol", None)


class EngineClient:
    """Chat calls and health probes against engines, sharing one connection pool."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        metrics: GatewayMetrics,
        probe_timeout: float,
        waits: Waits | None = None,
        wire: Wire | None = None,
    ):
        self.http = http
        self.wire = wire  # whole answers from plain-HTTP engines (``server/engines/wire.py``)
        self.metrics = metrics
        self.probe_timeout = probe_timeout
        self.waits = waits or Waits()
        # A whole answer's wait is bounded by ``deadline`` (an ``asyncio.timeout``), not a
        # per-read timeout. No pool bound either: aiohttp bounds "a pooled connection or a new
        # socket" as one and raises what a socket that will not connect raises, so a wait for
        # a busy engine's connection read as an unreachable engine (a 503 and a strike toward
        # ejection). The call's own bound covers that wait; only the connect has its own bound.
        base = http.timeout
        self._whole = httpx.Timeout(connect=base.connect, read=None, write=base.write, pool=None)
        self._first = httpx.Timeout(
            connect=base.connect, read=self.waits.first_byte, write=base.write, pool=None
        )
        # The same bounds in aiohttp's words, as httpx_aiohttp passes them on.
        self._aiohttp_whole = aiohttp.ClientTimeout(sock_connect=base.connect)
        self._aiohttp: aiohttp.ClientSession | None = None
        self._looked_up = False

    async def _send(self, engine: Engine, send: Callable[[], Awaitable[T]]) -> T:
        """``send()``, again while the connection it got was reset or closed before any answer.

        Up to ``RESET_RETRIES`` more times: after an engine restart every pooled socket is
        stale, and each retry may draw another one before a fresh connection is opened.
        """
        for _ in range(RESET_RETRIES):
            try:
                return await send()
            except httpx.HTTPError as exc:
                if not is_reset(exc):
                    raise
                self.metrics.engine_error(engine.name, "reset")
        return await send()

    def _fail(self, engine: Engine, error: EngineError) -> EngineError:
        self.metrics.engine_error(engine.name, error.kind)
        return error

    async def chat(
        self,
        engine: Engine,
        payload: bytes | None,
        role: str,
        *,
        affinity: bytes = b"",
        path: str = CHAT_PATH,
        method: str = "POST",
        bound_s: float | None = None,
    ) -> bytes:
        """One non-streamed call (a chat completion unless ``path`` says otherwise).

        The engine's JSON bytes on 2xx. ``path`` is from the engine's root (``/v1/…``,
        ``/tokenize``); ``payload`` is ``None`` for a GET. The whole answer must arrive within
        ``bound_s`` seconds (``RGW_REQUEST_TIMEOUT`` by default).
        """
        bound = self.waits.request if bound_s is None else bound_s
        started = time.perf_counter()
        headers = call_headers(engine, role, affinity)

        wire, plain = self.wire, engine.plain
        if wire is not None and plain is not None:
            host, port, authority, prefix = plain
            target = prefix + path

            def send() -> Awaitable[tuple[int, str, bytes]]:
                return wire.request(host, port, authority, method, target, headers, payload)

        else:
            url = engine.root_url + path

            def send() -> Awaitable[tuple[int, str, bytes]]:
                return self._whole_answer(engine, method, url, payload, headers)

        task = engine.watch()
        try:
            with waiting():
                async with deadline(bound):
                    status, kind, body = await self._send(engine, send)
        except httpx.HTTPError as exc:
            raise self._fail(engine, translate(exc, engine)) from exc
        except TimeoutError:
            message = f"engine {engine.name} gave no answer within {bound:g}s"
            raise self._fail(engine, EngineTimeout(message)) from None
        except asyncio.CancelledError:
            if engine.take_abort(task):
                raise self._fail(engine, hung(engine)) from None
            raise
        finally:
            engine.unwatch(task)
        self.metrics.observe_engine_call(engine.name, role, time.perf_counter() - started)
        note_engine(engine.name)
        engine.progressed()
        if status >= 300:
            raise self._fail(engine, from_status(status, body, engine))
        relayed = role == PASSTHROUGH_ROLE
        if relayed and not count_usage(self.metrics, body) and kind.startswith(JSON):
            raise self._fail(engine, malformed(engine, "a body that is not JSON"))
        return body

    async def _whole_answer(
        self, engine: Engine, method: str, url: str, payload: bytes | None, headers: dict[str, str]
    ) -> tuple[int, str, bytes]:
        """(status, content type, body) of one call: on aiohttp's session when there is one."""
        session = self._session()
        if session is None:
            answer = await self.http.request(
                method, url, content=payload, headers=headers, extensions=engine.extensions,
                timeout=self._whole,
            )  # fmt: skip
            return answer.status_code, answer.headers.get("content-type", JSON), answer.content
        with map_aiohttp_exceptions():
            async with session.request(
                method, url, data=payload, headers=headers, allow_redirects=False,
                auto_decompress=False, compress=False, timeout=self._aiohttp_whole,
                server_hostname=engine.extensions.get("sni_hostname"),
            ) as response:  # fmt: skip
                body = await response.read()
                return response.status, response.headers.get("content-type", JSON), body

    def _session(self) -> aiohttp.ClientSession | None:
        """The aiohttp session under the httpx client (the same connection pool), if any."""
        if not self._looked_up:
            self._looked_up = True
            transport = getattr(self.http, "_transport", None)
            if isinstance(transport, AiohttpTransport):
                if not isinstance(transport.client, aiohttp.ClientSession):
                    transport.client = transport.get_client()  # what its first request does
                self._aiohttp = transport.client
        return self._aiohttp

    async def open_stream(
        self,
        engine: Engine,
        payload: bytes,
        role: str,
        *,
        affinity: bytes = b"",
        path: str = CHAT_PATH,
        bound_s: float | None = None,
    ) -> EngineStream:
        """Start a streamed call (a chat completion by default) and wait for its first event.

        Everything that can fail before that event fails here, while the caller may still try
        another engine: a refusal, a reset, a 5xx, a 200 that is not SSE, or no event within
        ``first_byte`` (or ``bound_s``, the call's own bound, when shorter).
        """
        bound = self.waits.first_byte if bound_s is None else min(bound_s, self.waits.first_byte)
        started = time.perf_counter()
        request = self.http.build_request(
            "POST", engine.root_url + path, content=payload,
            headers=call_headers(engine, role, affinity), extensions=engine.extensions,
            timeout=self._first,
        )  # fmt: skip
        task = engine.watch()
        response: httpx.Response | None = None
        try:
            with waiting():
                async with deadline(bound):
                    response = await self._send(
                        engine, lambda: self.http.send(request, stream=True)
                    )
                    note_engine(engine.name)
                    first, tail, chunks = await self._first_events(engine, response)
        except httpx.HTTPError as exc:
            await _close(response)
            raise self._fail(engine, translate(exc, engine)) from exc
        except TimeoutError:
            await _close(response)
            message = f"engine {engine.name} sent no first chunk within {bound:g}s"
            raise self._fail(engine, EngineTimeout(message, retryable=True)) from None
        except asyncio.CancelledError:
            await _close(response)
            if engine.take_abort(task):
                raise self._fail(engine, hung(engine)) from None
            raise
        except BaseException:
            await _close(response)
            raise
        finally:
            engine.unwatch(task)
        engine.progressed()
        protocol = _aiohttp_protocol(response)
        if protocol is not None:  # from now on, the wait between two chunks
            protocol.read_timeout = self.waits.chunk
            protocol.start_timeout()
        stream = EngineStream(
            engine, response, chunks, first, role, started, self.metrics, tail,
            expects_done=path in DONE_PATHS,
        )  # fmt: skip
        if role == PASSTHROUGH_ROLE and b'"usage":{' in first:
            stream.count_usage(first)
        return stream

    async def _first_events(
        self, engine: Engine, response: httpx.Response
    ) -> tuple[bytes, bytes, AsyncIterator[bytes]]:
        """The first whole SSE events of an open answer, the tail after them, and the iterator."""
        if response.status_code >= 300:
            body = await response.aread()
            raise self._fail(engine, from_status(response.status_code, body, engine))
        chunks = response.aiter_raw()
        data = b""
        while True:
            chunk = await anext(chunks, b"")
            if not chunk:
                what = "an empty stream" if not data else "a stream cut before its first event"
                raise self._fail(engine, EngineFailed(f"engine {engine.name} sent {what}"))
            data += chunk
            start = data.lstrip()
            if start and not start.startswith(SSE_STARTS):
                raise self._fail(engine, malformed(engine, "a stream that is not SSE"))
            first, tail = split_events(data)
            if first:
                return first, tail, chunks

    async def probe(self, engine: Engine) -> Probe:
        """One health check: liveness, queue depth and served models. Never raises.

        A router's queue depth is not read: its ``/metrics`` is one of its engines' (whichever
        it forwards to), and the fleet's load is the router's to balance anyway.
        """

        def get(url: str) -> Awaitable[httpx.Response]:
            return self.http.get(
                url,
                timeout=self.probe_timeout,
                headers=engine.headers,
                extensions=engine.extensions,
            )

        depth = 0.0
        try:
            health = await get(engine.root_url + engine.health_path)
            if health.status_code != 200:
                return Probe(healthy=False, models=engine.models)
            models = await get(engine.base_url + "/models")
            if engine.router is None:
                metrics = await get(engine.root_url + "/metrics")
                depth = queue_depth(metrics.text) if metrics.status_code == 200 else 0.0
        except httpx.HTTPError as exc:
            timed_out = isinstance(exc, httpx.TimeoutException) and not is_reset(exc)
            return Probe(healthy=False, models=engine.models, timed_out=timed_out)
        cards = model_cards(models.content) if models.status_code == 200 else ()
        return Probe(
            healthy=True,
            queue_depth=depth,
            models=model_ids(cards) if models.status_code == 200 else engine.models,
            cards=cards,
        )


async def _close(response: httpx.Response | None) -> None:
    if response is not None:
        await response.aclose()
