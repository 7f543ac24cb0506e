"""The app factory: ``create_app(settings)`` builds the FastAPI app; its lifespan owns resources.

The lifespan creates the one transport to the engines (``engine_transport``), the
engine pool with a first round of health checks, the background health-check task and the chat
service, and hands them to routes as one ``GatewayState``. Every part is built once, lower
layers first, and handed to the ones above it. Every request, chat completions included, takes
one stack: pure ASGI middleware (request accounting outermost, then API keys, then fair use),
then FastAPI's router; errors reach clients only through ``server/http/handlers.py``. The
lifespan's state also carries the header timeout that the server's protocol reads
(``server/http/protocol.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.telemetry import TelemetryConfig

from .. import __version__
from .chat.model_switch import ModelSwitch
from .chat.precheck import build_precheck
from .chat.responses import ResponsesService
from .chat.service import ChatService
from .engines.calls import EngineCalls
from .engines.client import EngineClient, Waits
from .engines.discovery import EngineDiscovery, Resolver, resolve_system
from .engines.health import DOWN_REMINDER_S
from .engines.pool import EnginePool, EnginesReady
from .engines.stalls import StallWatch
from .engines.transport import EngineTransport
from .engines.transports import AiohttpTransport
from .engines.wire import WireTransport
from .http.accounting import RequestAccounting
from .http.auth import ApiKeyMiddleware, ApiKeyRing
from .http.handlers import add_error_handlers
from .http.limits import FairUseMiddleware
from .http.openapi import install as install_openapi
from .http.protocol import HEADER_TIMEOUT_KEY
from .http.relayed_routes import router as relayed_router
from .http.responses_routes import router as responses_router
from .http.routes import router
from .http.state import STATE_KEY, GatewayState
from .rehearse.defaults import (
    budget_caps,
    budget_defaults,
    planner_settings,
    rehearse_priority,
    risk_policy,
    trust_settings,
)
from .rehearse.feedback import Feedback
from .rehearse.service import RehearsalService
from .settings import GatewaySettings, mask_url
from .store.fair_use import FairUse
from .store.opening import StoreReady, open_store
from .store.writer import StoreWriter
from .telemetry.metrics import GatewayMetrics
from .telemetry.readiness import Draining, warn_while_failing

log = logging.getLogger("rehearsal_gateway.server")
# FastAPI's native OpenTelemetry off, unless RGW_FASTAPI_TELEMETRY (server/settings/).
NO_TELEMETRY: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}


def create_app(
    settings: GatewaySettings,
    *,
    resolver: Resolver = resolve_system,
    engine_transport: EngineTransport | None = None,
    owns_process: bool = False,
) -> FastAPI:
    """A gateway app for ``settings``; resources are created when its lifespan starts.

    ``resolver`` answers the DNS questions of ``discover=dns`` engines (the system's by default);
    ``engine_transport`` replaces the aiohttp transport built from the settings (a test's fake,
    a benchmark's contender); the lifespan closes it as it would its own. ``owns_process``: the
    app is the process's only tenant (what ``serve`` starts), so once started it may tune the
    process's garbage collector (``settle_heap``); an app embedded in another process leaves it
    alone.
    """
    metrics = GatewayMetrics(settings.metrics_dir)
    keyring = ApiKeyRing(key.get_secret_value() for key in settings.api_keys)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, object]]:
        async with open_state(settings, metrics, keyring, resolver, engine_transport) as state:
            if owns_process:
                settle_heap()
            # The header timeout is read by the server's protocol (server/http/protocol.py).
            yield {STATE_KEY: state, HEADER_TIMEOUT_KEY: settings.header_timeout}

    app = FastAPI(
        title="Rehearsal Gateway",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        telemetry=None if settings.fastapi_telemetry else NO_TELEMETRY,
    )
    install_openapi(app, settings)
    # The routers' routes themselves, not the routers: an included router is matched as one
    # more layer per request (~700 Python opcodes of a pass-through, benchmarks.opcodes).
    for declared in (router, responses_router, relayed_router):
        app.router.routes.extend(declared.routes)
    add_error_handlers(app)
    app.add_middleware(FairUseMiddleware)  # inside ApiKeyMiddleware: the tenant is known
    app.add_middleware(ApiKeyMiddleware, keyring=keyring)
    app.add_middleware(RequestAccounting, metrics=metrics)
    return app


def app_from_environment() -> FastAPI:
    """Factory for ``uvicorn --factory`` (each worker process builds its app from ``RGW_*``)."""
    return create_app(GatewaySettings(), owns_process=True)


# A young-generation collection every GC_YOUNG container allocations (CPython 3.11: 700), and
# the older ones as rarely again; the heap after start-up is frozen out of every scan.
GC_THRESHOLDS = (10_000, 20, 20)
# ``RGW_ENGINE_TRANSPORT`` -> the transport the lifespan builds from the settings.
TRANSPORTS: dict[str, type[WireTransport | AiohttpTransport]] = {
    "wire": WireTransport,
    "aiohttp": AiohttpTransport,
}


def settle_heap() -> None:
    """Keep CPython's cyclic collector off what lives as long as the process.

    A request allocates hundreds of containers (the parsed JSON body alone: one per message,
    tool and nested object), so at CPython's default thresholds a young collection runs every
    few requests and a full one every few thousand, and a full one walks every object the
    process holds (~100,000 after start-up: FastAPI, pydantic, Prometheus). ``gc.freeze()``
    moves those to a generation no collection scans, and higher thresholds run the collector on
    fewer, larger batches of young objects (docs/decisions/0009-garbage-collector-thresholds.md
    has the figures). Objects that become cyclic garbage after the freeze are still collected;
    only what was alive at start-up is never scanned again.
    """
    gc.set_threshold(*GC_THRESHOLDS)
    gc.freeze()


@asynccontextmanager
async def open_state(
    settings: GatewaySettings,
    metrics: GatewayMetrics,
    keyring: ApiKeyRing,
    resolver: Resolver = resolve_system,
    engine_transport: EngineTransport | None = None,
) -> AsyncIterator[GatewayState]:
    """Create every resource, run until the app stops, then release them in reverse order."""
    pool = EnginePool.from_specs(
        settings.all_engines,
        metrics,
        default_concurrency=settings.engine_max_concurrency,
        aliases=settings.aliases,
        queue_timeout=settings.queue_timeout,
        eject_after=settings.eject_after_failures,
        health_failures=settings.health_failures,
        rehearsal_share=settings.rehearsal_engine_share,
        rehearsal_yield=settings.rehearsal_yield,
        rehearsal_yield_quiet_s=settings.rehearsal_yield_quiet_s,
    )
    metrics.start_series(engine.name for engine in pool.engines)
    transport = engine_transport or TRANSPORTS[settings.engine_transport].of(settings)
    engines = EngineClient(transport, metrics, settings.health_timeout, Waits.of(settings))
    calls = EngineCalls(pool, engines, max_attempts=settings.max_attempts)
    store = open_store(settings)
    fair_use = FairUse.from_settings(settings, store, metrics)
    writer = StoreWriter(
        metrics,
        max_pending=settings.store_writes_max_pending,
        concurrency=settings.store_writes_concurrency,
        settle_wait_s=settings.store_settle_wait_s,
    )
    rehearsal = RehearsalService(
        calls,
        store,
        metrics,
        writer,
        defaults=budget_defaults(settings),
        caps=budget_caps(settings),
        planner=planner_settings(settings),
        trust=trust_settings(settings),
        risk=risk_policy(settings),
        rehearse_priority=rehearse_priority(settings),
        batch=settings.rehearsal_batch,
        commit_timeout=settings.commit_timeout,
        fair_use=fair_use if fair_use.enabled else None,
    )
    feedback = Feedback(store, metrics, writer)
    chat = ChatService(
        pool, calls, rehearsal=rehearsal, feedback=feedback, precheck=build_precheck(),
        switch=ModelSwitch.of(settings.model_switch),
    )  # fmt: skip
    responses = ResponsesService(chat, rehearsal, feedback)
    draining = Draining()
    state = GatewayState(
        settings, metrics, keyring, pool, engines, chat, store, rehearsal, responses,
        checks=[draining, EnginesReady(pool), StoreReady(store)],
        fair_use=fair_use if fair_use.enabled else None,
    )  # fmt: skip
    discovery = EngineDiscovery(
        pool,
        [spec for spec in settings.all_engines if spec.discover],
        engines.probe,
        settings.engine_max_concurrency,
        resolver,
    )
    try:
        await discovery.refresh()
        await pool.check_all(engines.probe)
        # Also the store's first connections, before the first request needs them: a Redis
        # Cluster client learns the slot map on its first command, which can outlast the
        # request path's RGW_REDIS_TIMEOUT on a busy host. Unreachable only degrades (/ready).
        store_ready = StoreReady(store)
        store_state = await store_ready.check()
        interval = settings.health_interval
        health = asyncio.create_task(pool.run_health_checks(engines.probe, interval))
        tasks = [health]
        if settings.redis_url is not None:
            where = f"Redis store {mask_url(settings.redis_url.get_secret_value())}"
            store_watch = warn_while_failing(store_ready, store_state, where, DOWN_REMINDER_S)
            tasks.append(asyncio.create_task(store_watch))
        if settings.engine_stall_after_s > 0:
            stalls = StallWatch(
                pool, engines.canary, after_s=settings.engine_stall_after_s,
                timeout_s=settings.engine_canary_timeout_s, retry_s=interval,
            )  # fmt: skip
            tasks.append(asyncio.create_task(stalls.run()))
        if discovery.groups:
            tasks.append(asyncio.create_task(discovery.run(settings.discovery_interval)))
        log.info(
            "gateway ready: %d engine(s), %d healthy; API keys %s; store %s",
            len(pool.engines),
            sum(engine.healthy for engine in pool.engines),
            "on" if keyring.enabled else "off",
            store_state.detail,
        )
        try:
            with draining.on_signals():
                yield state
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    finally:
        await writer.close(settings.store_drain_s)  # hindsight written before the store closes
        await store.close()
        await transport.aclose()
        metrics.worker_exited(os.getpid())
