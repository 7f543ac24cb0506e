"""HTTP calls to one engine, through the app's single ``httpx.AsyncClient``.

``engine_http_client`` builds that client: httpx's API over aiohttp's connection pool and
parser (``httpx_aiohttp``), for http and https engines alike. Measured against the hand-written
transport it replaced (``python -m benchmarks.gateway_cpu --transports``, docs/benchmarks.md),
it costs 1.07-1.10x that one's gateway CPU per pass-through request and 1.01-1.14x per rehearsed
one over two runs, inside the 15% we allowed a maintained library, where httpx's default
transport costs 1.6-1.7x; and it closes idle sockets, reopens one the engine closed, reads
close-delimited answers and speaks TLS, which the hand-written one did not.

This is the adapter boundary: every httpx exception and every non-2xx answer becomes an
``EngineError`` here (``server/errors.py`` draws the tree), and each failure is counted once in
``rehearsal_gateway_engine_errors_total``. Bodies are moved as bytes: a request goes out as the
bytes the caller gives, a non-streamed answer comes back as the engine's bytes, and a stream is
handed over chunk by chunk as the socket delivers it.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from httpx_aiohttp import AiohttpTransport

from rehearsal.messages import Usage
from server.engines.pool import Engine, Probe
from server.errors import (
    EngineError,
    EngineFailed,
    EngineOverloaded,
    EngineRejected,
    EngineTimeout,
    EngineUnavailable,
)
from server.settings import GatewaySettings
from server.telemetry.logs import engine_request_id, note_engine, note_tokens
from server.telemetry.metrics import GatewayMetrics
from server.telemetry.waits import waiting

JSON_HEADERS = {"content-type": "application/json"}
CHAT_PATH = "/v1/chat/completions"
PASSTHROUGH_ROLE = "passthrough"  # the one role whose tokens only the engine's answer tells


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
            read=settings.read_timeout,
            write=settings.write_timeout,
            pool=settings.queue_timeout,
        ),
        transport=transport or AiohttpTransport(verify=verify, trust_env=False, limits=limits),
        # Relay bytes as the engine sends them; never let proxy variables reroute loopback.
        headers={"accept-encoding": "identity"},
        trust_env=False,
    )


def engine_headers(engine: Engine, role: str) -> dict[str, str]:
    """Headers of one engine call: JSON, the request's id (derived for rehearsal calls), and the
    ``Host`` an engine with a TLS name is addressed by.

    vLLM takes ``X-Request-Id`` as its own request id (its logs, its response ``id``), so the
    engine's log lines can be matched to the gateway's request line.
    """
    headers = JSON_HEADERS
    request_id = engine_request_id(role)
    if request_id is not None:
        headers = {**headers, "x-request-id": request_id}
    if engine.headers:
        headers = {**headers, **engine.headers}
    return headers


def call_headers(engine: Engine, role: str, affinity: bytes) -> dict[str, str]:
    """``engine_headers``, plus the affinity key in the form a router hashes on.

    vllm-router reads ``x-session-id`` before ``x-request-id``, so the per-call request id
    above does not scatter one rehearsal's calls (``server/engines/routers.py``).
    """
    headers = engine_headers(engine, role)
    if engine.router is None:
        return headers
    return {**headers, **engine.router.headers(affinity)}


def count_usage(metrics: GatewayMetrics, body: bytes) -> None:
    """Count a pass-through answer's ``usage`` (a JSON body, or one SSE chunk's data)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return
    usage = Usage.from_openai(data.get("usage") if isinstance(data, dict) else None)
    metrics.observe_passthrough_usage(usage.prompt, usage.completion, usage.cached)
    note_tokens(PASSTHROUGH_ROLE, usage.to_dict())


def translate(exc: httpx.HTTPError, engine: Engine) -> EngineError:
    """The gateway error for an httpx failure while talking to ``engine``."""
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return EngineUnavailable(f"engine {engine.name} is unreachable")
    if isinstance(exc, httpx.PoolTimeout):
        return EngineOverloaded(f"no free connection to engine {engine.name}")
    if isinstance(exc, httpx.TimeoutException):
        return EngineTimeout(f"engine {engine.name} did not answer within the upstream timeout")
    return EngineFailed(f"the connection to engine {engine.name} broke ({type(exc).__name__})")


def from_status(status: int, body: bytes, engine: Engine) -> EngineError:
    """The gateway error for a non-2xx engine answer; a 4xx keeps the engine's own words."""
    if status >= 500 or status < 400:
        return EngineFailed(f"engine {engine.name} answered HTTP {status}", kind="status_5xx")
    fields: dict[str, Any] = {}
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        # vLLM answers {"error": {...}} now and the flat {"object": "error", ...} in older releases.
        inner = data.get("error")
        fields = inner if isinstance(inner, dict) else data
    message = fields.get("message")
    if not isinstance(message, str):
        message = body.decode("utf-8", "replace")[:2000] or f"engine answered HTTP {status}"
    type_ = fields.get("type")
    param = fields.get("param")
    return EngineRejected(
        status,
        message,
        type_=type_ if isinstance(type_, str) else "invalid_request_error",
        param=param if isinstance(param, str) else None,
        code=fields.get("code") if isinstance(fields.get("code"), str | int) else None,
    )


@dataclass(eq=False)
class EngineStream:
    """An open streamed answer whose first chunk has arrived; iterate for the rest."""

    engine: Engine
    response: httpx.Response
    chunks: AsyncIterator[bytes]  # the response's one raw-byte iterator, ``first`` already taken
    first: bytes
    role: str
    started: float
    metrics: GatewayMetrics
    _closed: bool = False

    async def rest(self) -> AsyncIterator[bytes]:
        """The chunks after ``first``; a failure mid-stream raises an ``EngineError``."""
        try:
            while True:
                with waiting():
                    chunk = await anext(self.chunks, b"")
                if not chunk:
                    return
                if self.role == PASSTHROUGH_ROLE and b'"usage":{' in chunk:
                    self.count_usage(chunk)
                yield chunk
        except httpx.HTTPError as exc:
            error = translate(exc, self.engine)
            self.metrics.engine_error(self.engine.name, error.kind)
            raise error from exc

    def count_usage(self, chunk: bytes) -> None:
        # The usage chunk (``stream_options.include_usage``) comes last and whole in practice;
        # one split across two reads goes uncounted rather than slowing every chunk down. Only
        # that chunk (empty ``choices``) counts: with vLLM's ``continuous_usage_stats`` every
        # chunk carries the running totals, which summed would count the stream many times over.
        for line in chunk.split(b"\n"):
            if line.startswith(b"data: {") and b'"usage":{' in line and b'"choices":[]' in line:
                count_usage(self.metrics, line[6:])

    async def aclose(self) -> None:
        """Close the upstream response (which aborts the engine's request if still running)."""
        if self._closed:
            return
        self._closed = True
        await self.response.aclose()
        elapsed = time.perf_counter() - self.started
        self.metrics.observe_engine_call(self.engine.name, self.role, elapsed)


class EngineClient:
    """Chat calls and health probes against engines, sharing one connection pool."""

    def __init__(self, http: httpx.AsyncClient, metrics: GatewayMetrics, probe_timeout: float):
        self.http = http
        self.metrics = metrics
        self.probe_timeout = probe_timeout

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
    ) -> bytes:
        """One non-streamed call (a chat completion unless ``path`` says otherwise).

        The engine's JSON bytes on 2xx. ``path`` is from the engine's root (``/v1/…``,
        ``/tokenize``); ``payload`` is ``None`` for a GET.
        """
        started = time.perf_counter()
        try:
            with waiting():
                response = await self.http.request(
                    method,
                    engine.root_url + path,
                    content=payload,
                    headers=call_headers(engine, role, affinity),
                    extensions=engine.extensions,
                )
        except httpx.HTTPError as exc:
            raise self._fail(engine, translate(exc, engine)) from exc
        self.metrics.observe_engine_call(engine.name, role, time.perf_counter() - started)
        note_engine(engine.name)
        if response.status_code >= 300:
            raise self._fail(engine, from_status(response.status_code, response.content, engine))
        if role == PASSTHROUGH_ROLE:
            count_usage(self.metrics, response.content)
        return response.content

    async def open_stream(
        self,
        engine: Engine,
        payload: bytes,
        role: str,
        *,
        affinity: bytes = b"",
        path: str = CHAT_PATH,
    ) -> EngineStream:
        """Start a streamed call (a chat completion by default) and wait for its first chunk.

        Everything that can fail before that chunk fails here, while the caller may still try
        another engine.
        """
        started = time.perf_counter()
        request = self.http.build_request(
            "POST",
            engine.root_url + path,
            content=payload,
            headers=call_headers(engine, role, affinity),
            extensions=engine.extensions,
        )
        try:
            with waiting():
                response = await self.http.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise self._fail(engine, translate(exc, engine)) from exc
        note_engine(engine.name)
        try:
            if response.status_code >= 300:
                body = await response.aread()
                raise self._fail(engine, from_status(response.status_code, body, engine))
            chunks = response.aiter_raw()
            with waiting():
                first = await anext(chunks, b"")
            if not first:
                raise self._fail(engine, EngineFailed(f"engine {engine.name} sent an empty stream"))
        except httpx.HTTPError as exc:
            await response.aclose()
            raise self._fail(engine, translate(exc, engine)) from exc
        except BaseException:
            await response.aclose()
            raise
        stream = EngineStream(engine, response, chunks, first, role, started, self.metrics)
        if role == PASSTHROUGH_ROLE and b'"usage":{' in first:
            stream.count_usage(first)
        return stream

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
        except httpx.HTTPError:
            return Probe(healthy=False, models=engine.models)
        cards = model_cards(models.content) if models.status_code == 200 else ()
        return Probe(
            healthy=True,
            queue_depth=depth,
            models=model_ids(cards) if models.status_code == 200 else engine.models,
            cards=cards,
        )


def queue_depth(exposition: str) -> float:
    """The sum of ``vllm:num_requests_waiting`` samples in a Prometheus exposition."""
    total = 0.0
    for line in exposition.splitlines():
        if line.startswith("vllm:num_requests_waiting"):
            try:
                total += float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                continue
    return total


def model_cards(body: bytes) -> tuple[dict[str, Any], ...]:
    """The entries of an OpenAI ``/v1/models`` answer that have an id (empty when not one)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ()
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return ()
    return tuple(
        item for item in items if isinstance(item, dict) and isinstance(item.get("id"), str)
    )


def model_ids(cards: tuple[dict[str, Any], ...]) -> tuple[str, ...]:
    """The ids of ``/v1/models`` entries."""
    return tuple(card["id"] for card in cards)
