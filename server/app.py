"""The app factory: ``create_app(settings)`` builds the FastAPI app; its lifespan owns resources.

The lifespan creates the one ``httpx.AsyncClient`` (explicit timeouts and connection limits), the
engine pool with a first round of health checks, the background health-check task and the chat
service, and hands them to routes as one ``GatewayState``. Middleware is pure ASGI: request
accounting (request id, metrics, one JSON log line) outermost, then API keys. Errors reach
clients only through the table in ``server/errors.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.chat.service import PASSTHROUGH, ChatService, EnginesReady
from server.engines.client import EngineClient
from server.engines.discovery import EngineDiscovery, Resolver, resolve_system
from server.engines.pool import EnginePool
from server.engines.transport import EngineTransport
from server.errors import (
    GatewayError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    error_status_and_body,
    internal_error_body,
)
from server.http.auth import ApiKeyMiddleware, ApiKeyRing
from server.http.relay import ClientDisconnected
from server.http.relayed_routes import router as relayed_router
from server.http.responses_routes import router as responses_router
from server.http.routes import router
from server.http.state import (
    CONTENT_STATE_KEY,
    MODE_STATE_KEY,
    OUTCOME_STATE_KEY,
    REHEARSAL_STATE_KEY,
    RELAYED_STATE_KEY,
    STATE_KEY,
    GatewayState,
)
from server.rehearse.feedback import Feedback
from server.rehearse.responses import ResponsesService
from server.rehearse.service import RehearsalService
from server.settings import GatewaySettings
from server.store.opening import (
    StoreReady,
    budget_caps,
    budget_defaults,
    open_store,
    planner_settings,
    trust_settings,
)
from server.telemetry.logs import (
    REQUEST_ID_HEADER,
    REQUEST_LOGGER,
    RequestRecord,
    current_record,
    request_id_from,
    request_line,
)
from server.telemetry.metrics import GatewayMetrics
from server.telemetry.waits import WaitClock, current_clock

log = logging.getLogger("rehearsal_gateway.server")
request_log = logging.getLogger(REQUEST_LOGGER)

CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"
# Requests that may be rehearsed: counted by mode in ``requests_total``, one "chat request" line.
REQUEST_PATHS = frozenset((CHAT_PATH, RESPONSES_PATH))
# Every relayed route lives under one of these (``server/chat/relayed.py``); the rest are ours.
RELAYED_PREFIXES = ("/v1/", "/tokenize", "/detokenize", "/version", "/invocations", "/generative")
CLIENT_CLOSED = 499  # nginx's status for "client closed the request"; only ever in metrics


def create_app(settings: GatewaySettings, *, resolver: Resolver = resolve_system) -> FastAPI:
    """A gateway app for ``settings``; resources are created when its lifespan starts.

    ``resolver`` answers the DNS questions of ``discover=dns`` engines (the system's by default).
    """
    metrics = GatewayMetrics(settings.metrics_dir)
    keyring = ApiKeyRing(key.get_secret_value() for key in settings.api_keys)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, GatewayState]]:
        async with open_state(settings, metrics, keyring, resolver) as state:
            yield {STATE_KEY: state}

    app = FastAPI(
        title="Rehearsal Gateway",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.include_router(router)
    app.include_router(responses_router)
    app.include_router(relayed_router)
    app.add_exception_handler(GatewayError, _gateway_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(ClientDisconnected, _client_gone)
    app.add_exception_handler(Exception, _internal_error)
    app.add_middleware(ApiKeyMiddleware, keyring=keyring)
    app.add_middleware(RequestAccounting, metrics=metrics)
    return app


def app_from_environment() -> FastAPI:
    """Factory for ``uvicorn --factory`` (each worker process builds its app from ``RGW_*``)."""
    return create_app(GatewaySettings())


@asynccontextmanager
async def open_state(
    settings: GatewaySettings,
    metrics: GatewayMetrics,
    keyring: ApiKeyRing,
    resolver: Resolver = resolve_system,
) -> AsyncIterator[GatewayState]:
    """Create every resource, run until the app stops, then release them in reverse order."""
    pool = EnginePool.from_specs(
        settings.engines,
        metrics,
        default_concurrency=settings.engine_max_concurrency,
        aliases=settings.aliases,
        queue_timeout=settings.queue_timeout,
    )
    metrics.start_series(engine.name for engine in pool.engines)
    # A discovered group may grow; size the (https-only) shared pool for a few engines each.
    default = settings.engine_max_concurrency
    connections = sum(
        ((spec.max_concurrency or default) + 4) * (4 if spec.discover else 1)
        for spec in settings.engines
    )
    http = httpx.AsyncClient(
        timeout=httpx.Timeout(
            connect=settings.connect_timeout,
            read=settings.read_timeout,
            write=settings.write_timeout,
            pool=settings.queue_timeout,
        ),
        # Plain-http engines go through the lean transport; https ones through httpx's own pool.
        mounts={"http://": EngineTransport(max_idle_per_origin=connections)},
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        # Relay bytes as the engine sends them; never let proxy variables reroute loopback.
        headers={"accept-encoding": "identity"},
        trust_env=False,
    )
    engines = EngineClient(http, metrics, settings.health_timeout)
    chat = ChatService(pool, engines, max_attempts=settings.max_attempts)
    store = open_store(settings)
    rehearsal = RehearsalService(
        chat,
        store,
        metrics,
        defaults=budget_defaults(settings),
        caps=budget_caps(settings),
        planner=planner_settings(settings),
        trust=trust_settings(settings),
    )
    chat.rehearsal = rehearsal
    chat.feedback = Feedback(store, metrics)
    responses = ResponsesService(chat, rehearsal, chat.feedback)
    state = GatewayState(
        settings, metrics, keyring, http, pool, engines, chat, store, rehearsal, responses
    )
    state.checks.append(EnginesReady(pool))
    state.checks.append(StoreReady(store))
    discovery = EngineDiscovery(
        pool,
        [spec for spec in settings.engines if spec.discover],
        engines.probe,
        settings.engine_max_concurrency,
        resolver,
    )
    try:
        await discovery.refresh()
        await pool.check_all(engines.probe)
        interval = settings.health_interval
        health = asyncio.create_task(pool.run_health_checks(engines.probe, interval))
        tasks = [health]
        if discovery.groups:
            tasks.append(asyncio.create_task(discovery.run(settings.discovery_interval)))
        log.info(
            "gateway ready: %d engine(s), %d healthy; API keys %s; store %s",
            len(pool.engines),
            sum(engine.healthy for engine in pool.engines),
            "on" if keyring.enabled else "off",
            store.kind,
        )
        try:
            yield state
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    finally:
        await store.close()
        await http.aclose()
        metrics.worker_exited(os.getpid())


class RequestAccounting:
    """Pure ASGI: request id, metrics and the JSON log line of each request to an engine.

    Every HTTP response carries ``X-Request-Id`` (the client's when sane, else minted), and every
    engine call the request makes carries it too (``server/engines/client.py``). A chat or
    responses request moves the in-flight gauge, the request counter by mode/outcome, the
    duration and overhead histograms, and leaves one "chat request" line on the
    ``rehearsal_gateway.request`` logger; a relayed request (``/tokenize``, ``/v1/completions``,
    …) moves the in-flight gauge and the relayed-request families, and leaves a "relayed
    request" line naming its route.
    """

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        record = RequestRecord(request_id_from(scope["headers"]))
        request_id = record.request_id.encode("ascii")
        started = time.perf_counter()
        status = 500

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [*message.get("headers", ()), (REQUEST_ID_HEADER, request_id)]
                message = {**message, "headers": headers}
            await send(message)

        if scope["path"] not in REQUEST_PATHS and not scope["path"].startswith(RELAYED_PREFIXES):
            await self.app(scope, receive, send_and_note)
            return
        clock = WaitClock()
        token = current_clock.set(clock)
        record_token = current_record.set(record)
        with self.metrics.track_in_flight():
            try:
                await self.app(scope, receive, send_and_note)
            finally:
                current_clock.reset(token)
                current_record.reset(record_token)
                self._account(scope, record, status, time.perf_counter() - started, clock)

    def _account(
        self, scope: Scope, record: RequestRecord, status: int, elapsed: float, clock: WaitClock
    ) -> None:
        state = scope.get("state", {})
        outcome = "ok" if status < 400 else "client_error" if status < 500 else "error"
        relayed = state.get(RELAYED_STATE_KEY)
        if relayed is not None:
            self.metrics.observe_relayed(relayed, outcome, elapsed)
            if request_log.isEnabledFor(logging.INFO):
                fields = request_line(
                    record, state, status=status, outcome=outcome, mode=PASSTHROUGH,
                    elapsed=elapsed, waited=clock.waited, rehearsal=None,
                )  # fmt: skip
                request_log.info("relayed request", extra={**fields, "route": relayed})
            return
        if scope["path"] not in REQUEST_PATHS:
            return  # no such route: nothing to account
        mode = state.get(MODE_STATE_KEY, PASSTHROUGH)
        if outcome == "ok":
            outcome = state.get(OUTCOME_STATE_KEY, outcome)
        self.metrics.observe_request(mode, outcome, elapsed)
        self.metrics.observe_overhead(mode, elapsed - clock.waited)
        if request_log.isEnabledFor(logging.INFO):
            fields = request_line(
                record, state, status=status, outcome=outcome, mode=mode,
                elapsed=elapsed, waited=clock.waited,
                rehearsal=state.get(REHEARSAL_STATE_KEY),
                content=state.get(CONTENT_STATE_KEY),
            )  # fmt: skip
            request_log.info("chat request", extra=fields)


def _error_response(exc: GatewayError, headers: dict[str, str] | None = None) -> Response:
    status, body = error_status_and_body(exc)
    return Response(body, status, headers=headers, media_type="application/json")


async def _gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    return _error_response(exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        return _error_response(
            MethodNotAllowed(f"{request.method} is not allowed on {request.url.path}"),
            headers=dict(exc.headers or {}),
        )
    if exc.status_code == 404:
        return _error_response(NotFound(f"no route for {request.url.path}"))
    return _error_response(InvalidRequest(str(exc.detail)))


async def _validation_error(request: Request, exc: Exception) -> Response:
    return _error_response(InvalidRequest("the request does not match the endpoint's schema"))


async def _client_gone(request: Request, exc: Exception) -> Response:
    return Response(status_code=CLIENT_CLOSED)


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s", request.url.path, exc_info=exc)
    return Response(internal_error_body(), 500, media_type="application/json")
