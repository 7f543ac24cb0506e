"""Engine calls through the transport seam: chat completions, streams, probes and canaries.

``EngineClient`` speaks to engines only through an ``EngineTransport``
(``server/engines/transport.py``), which the lifespan chooses; so a test's fake transport runs
every line of this module as it serves.

This is the adapter boundary: every transport failure and every non-2xx answer becomes an
``EngineError`` here (``server/errors.py`` draws the tree), and each failure is counted once in
``rehearsal_gateway_engine_errors_total``. Bodies are moved as bytes: a request goes out as the
bytes the caller gives, a non-streamed answer comes back as the engine's bytes, and a stream is
handed over as whole SSE events, as the socket delivers them (a read that ends mid-event keeps
its tail for the next one, so a stream cut mid-event never shows the client half an event).

Every wait is bounded here, the same for every transport (``Waits``): the connect by
``connect``; a whole non-streamed answer by the call's bound; a stream's first event by
``first_byte``, then each later read by ``chunk`` (``server/engines/streams.py``). A call
waiting on an engine registers its task with the engine (``Engine.watch``), so a hung engine's
calls are aborted as soon as its probes say so (``server/engines/pool.py``). A connection reset
or closed before any byte of the answer (a keep-alive socket the engine closed as it was reused,
the ECONNRESET and EOF races alike) is tried again on a fresh connection before it counts as the
engine's failure.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import httpx
import orjson

from ..errors import EngineError, EngineFailed, EngineTimeout
from ..settings import GatewaySettings
from ..telemetry.logs import note_engine
from ..telemetry.metrics import GatewayMetrics
from ..telemetry.waits import deadline, waiting
from .engine import (
    JSON,
    call_headers,
    engine_headers,
    generated_tokens,
    model_cards,
    model_ids,
    queue_depth,
)
from .faults import (
    PASSTHROUGH_ROLE,
    count_usage,
    from_status,
    hung,
    is_reset,
    malformed,
    translate,
)
from .pool import Engine, Probe
from .streams import (
    CHAT_PATH,
    DONE_PATHS,
    SSE_STARTS,
    EngineStream,
    split_events,
)
from .transport import (
    EngineRequest,
    EngineResponse,
    EngineTransport,
)

__all__ = ["CHAT_PATH", "EngineClient", "EngineStream", "Waits", "call_headers"]

T = TypeVar("T")
RESET_RETRIES = 3  # sends that may meet a reset socket before the call counts as failed
PROBE_HEADERS = {"accept-encoding": "identity"}
CANARY_ROLE = "canary"
CANARY_MESSAGES = [{"role": "user", "content": "Reply with OK."}]


@dataclass(frozen=True, slots=True)
class Waits:
    """How long an engine call may wait (seconds), from the ``RGW_*`` settings."""

    first_byte: float = 60.0
    chunk: float = 30.0
    request: float = 600.0
    connect: float = 3.0

    @classmethod
    def of(cls, settings: GatewaySettings) -> Waits:
        return cls(
            first_byte=settings.first_byte_timeout,
            chunk=settings.chunk_timeout,
            request=settings.request_timeout,
            connect=settings.connect_timeout,
        )


class EngineClient:
    """Chat calls and health probes against engines, over one transport."""

    def __init__(
        self,
        transport: EngineTransport,
        metrics: GatewayMetrics,
        probe_timeout: float,
        waits: Waits | None = None,
    ):
        self.transport = transport
        self.metrics = metrics
        self.probe_timeout = probe_timeout
        self.waits = waits or Waits()

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
        request = EngineRequest(
            method, engine.root_url + path, call_headers(engine, role, affinity), payload,
            self.waits.connect, engine.server_name,
        )  # fmt: skip
        task = engine.watch()
        try:
            with waiting():
                async with deadline(bound):
                    status, kind, body = await self._send(engine, lambda: self._whole(request))
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

    async def _whole(self, request: EngineRequest) -> tuple[int, str, bytes]:
        """(status, content type, body) of one call (``read`` closes the answer on a failure)."""
        response = await self.transport.send(request)
        body = await response.read()
        return response.status, response.headers.get("content-type", JSON), body

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
        request = EngineRequest(
            "POST", engine.root_url + path, call_headers(engine, role, affinity), payload,
            self.waits.connect, engine.server_name,
        )  # fmt: skip
        task = engine.watch()
        response: EngineResponse | None = None
        try:
            with waiting():
                async with deadline(bound):
                    response = await self._send(engine, lambda: self.transport.send(request))
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
        stream = EngineStream(
            engine, response, chunks, first, role, started, self.metrics, tail,
            expects_done=path in DONE_PATHS, chunk_s=self.waits.chunk,
        )  # fmt: skip
        if role == PASSTHROUGH_ROLE and b'"usage":{' in first:
            stream.count_usage(first)
        return stream

    async def _first_events(
        self, engine: Engine, response: EngineResponse
    ) -> tuple[bytes, bytes, AsyncIterator[bytes]]:
        """The first whole SSE events of an open answer, the tail after them, and the iterator."""
        if response.status >= 300:
            body = await response.read()
            raise self._fail(engine, from_status(response.status, body, engine))
        chunks = response.chunks()
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

        Each of its calls must answer within ``probe_timeout``; a pooled socket that was reset or
        closed under it is retried as a chat call's is, so stale sockets (an engine restarted, an
        idle socket closed by a proxy) do not count against a live engine. A router's queue
        depth is not read: its ``/metrics`` is one of its engines' (whichever it forwards to),
        and the fleet's load is the router's to balance anyway.
        """
        headers = {**PROBE_HEADERS, **engine.headers}

        async def get(url: str) -> tuple[int, bytes]:
            request = EngineRequest(
                "GET", url, headers, None, self.probe_timeout, engine.server_name
            )
            async with asyncio.timeout(self.probe_timeout):
                response = await self._send(engine, lambda: self.transport.send(request))
                return response.status, await response.read()

        depth = 0.0
        generated = None
        try:
            health, _ = await get(engine.root_url + engine.health_path)
            if health != 200:
                reason = f"{engine.health_path} answered HTTP {health}"
                return Probe(healthy=False, models=engine.models, reason=reason)
            status, models = await get(engine.base_url + "/models")
            if engine.router is None:
                metrics, exposition = await get(engine.root_url + "/metrics")
                if metrics == 200:
                    text = exposition.decode("utf-8", "replace")
                    depth, generated = queue_depth(text), generated_tokens(text)
        except TimeoutError:
            reason = f"no answer within {self.probe_timeout:g} s"
            return Probe(healthy=False, models=engine.models, timed_out=True, reason=reason)
        except httpx.HTTPError as exc:
            timed_out = isinstance(exc, httpx.TimeoutException) and not is_reset(exc)
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            return Probe(healthy=False, models=engine.models, timed_out=timed_out, reason=reason)
        cards = model_cards(models) if status == 200 else ()
        return Probe(
            healthy=True,
            queue_depth=depth,
            models=model_ids(cards) if status == 200 else engine.models,
            cards=cards,
            generated=generated,
        )

    async def canary(self, engine: Engine) -> bool:
        """One one-token chat completion to ``engine``: whether it answered at all.

        An answer below 500 counts, a refusal too: the question is whether the engine still
        answers calls, not whether it likes this one. A 5xx, a broken connection or a failure
        to connect do not. It takes no slot of the engine's; the stall watch bounds it in time
        (``server/engines/stalls.py``).
        """
        body = {"messages": CANARY_MESSAGES, "max_tokens": 1, "temperature": 0}
        if engine.models:
            body["model"] = engine.models[0]
        request = EngineRequest(
            "POST", engine.root_url + CHAT_PATH, engine_headers(engine, CANARY_ROLE),
            orjson.dumps(body), self.waits.connect, engine.server_name,
        )  # fmt: skip
        try:
            response = await self.transport.send(request)
            await response.read()
        except httpx.HTTPError:
            return False
        return response.status < 500


async def _close(response: EngineResponse | None) -> None:
    if response is not None:
        await response.aclose()
