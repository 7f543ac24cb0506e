"""The engine pool: which engine serves a call, how much each carries, whether each is alive.

Routing is **session-affine**. A call carries an affinity key (``X-Session-Id``, else the
request's ``user``, else a hash of the conversation's first messages); among the engines that
serve the wanted role and model, the one with the highest rendezvous score for that key is
preferred, so one conversation keeps landing where its prefix is cached, and removing an engine
only moves the sessions it held. When the preferred engine is unhealthy or at its concurrency
limit, the least-loaded healthy engine with room takes the call; when all are full the call waits
(up to ``queue_timeout``) for a slot.

Health comes from two sides: a periodic probe (``/health``, ``/metrics`` for the queue depth,
``/v1/models`` for served names) and passive marking when a call cannot connect. The pool holds no
HTTP client: probing is a function handed to ``run_health_checks``.

An entry may be a router in front of a fleet (``router=vllm-router``,
``server/engines/routers.py``): the pool then treats it as one engine with no concurrency limit of
its own unless one is configured, and every call to it carries the call's affinity key in the form
that router hashes on.

The set of engines may change while serving: ``replace_group`` swaps the members of one
discovered group (``server/engines/discovery.py``). Calls in flight on a departed engine finish
there; only new calls stop going to it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson

from server.engines.routers import DIALECTS, RouterDialect
from server.errors import EngineOverloaded, EngineUnavailable, ModelNotFound
from server.settings import EngineSpec, Role
from server.telemetry.metrics import GatewayMetrics
from server.telemetry.readiness import CheckResult

log = logging.getLogger("rehearsal_gateway.engines")

# A router queues and sheds load across its fleet itself (vllm-router: --max-concurrent-requests,
# --queue-size); a per-entry cap sized for one engine would throttle the whole fleet.
ROUTER_CONCURRENCY = 1_000_000


@dataclass(frozen=True, slots=True)
class Probe:
    """What one health check learned about an engine."""

    healthy: bool
    queue_depth: float = 0.0
    models: tuple[str, ...] = ()
    cards: tuple[dict[str, Any], ...] = ()  # the engine's /v1/models entries, as it wrote them


@dataclass(eq=False, slots=True)
class Engine:
    """One upstream engine and its live state."""

    spec: EngineSpec
    max_concurrency: int
    group: str = ""  # the discovered name this engine is one address of; "" when configured
    name: str = ""
    base_url: str = ""  # ends in /v1
    root_url: str = ""  # where /health and /metrics live
    headers: dict[str, str] = field(default_factory=dict)  # sent on every call (Host, for TLS)
    extensions: dict[str, str] = field(default_factory=dict)  # httpx's: the TLS server name
    models: tuple[str, ...] = ()
    cards: tuple[dict[str, Any], ...] = ()
    healthy: bool = False
    in_flight: int = 0
    queue_depth: float = 0.0
    router: RouterDialect | None = None
    _key: bytes = b""

    def __post_init__(self) -> None:
        self.name = self.spec.label
        url = self.spec.url
        self.base_url = url if url.endswith("/v1") else url + "/v1"
        self.root_url = self.base_url.removesuffix("/v1")
        self.models = (self.spec.model,) if self.spec.model else ()
        self._key = self.name.encode()
        if self.spec.tls_name:
            port = urlsplit(url).port
            self.headers = {"host": f"{self.spec.tls_name}:{port}" if port else self.spec.tls_name}
            self.extensions = {"sni_hostname": self.spec.tls_name}
        self.router = DIALECTS[self.spec.router] if self.spec.router else None

    @property
    def health_path(self) -> str:
        return self.router.health_path if self.router else "/health"

    @property
    def roles(self) -> frozenset[Role]:
        return self.spec.roles

    @property
    def has_room(self) -> bool:
        return self.in_flight < self.max_concurrency

    @property
    def load(self) -> float:
        """Share of the engine's capacity in use, counting what waits in its own queue."""
        return (self.in_flight + self.queue_depth) / self.max_concurrency

    def score(self, affinity: bytes) -> int:
        """Rendezvous-hash weight of this engine for an affinity key."""
        digest = hashlib.blake2b(affinity + self._key, digest_size=8).digest()
        return int.from_bytes(digest, "big")


def concurrency_limit(spec: EngineSpec, default: int) -> int:
    """How many calls the gateway lets one entry carry at once."""
    if spec.max_concurrency:
        return spec.max_concurrency
    return ROUTER_CONCURRENCY if spec.router else default


def affinity_key(session_id: str | None, user: str | None, messages: Sequence[object]) -> bytes:
    """The routing key of a call: session header > ``user`` > the first two messages."""
    if session_id:
        return b"s:" + session_id.encode()
    if user:
        return b"u:" + user.encode()
    head = orjson.dumps(list(messages[:2]), option=orjson.OPT_SORT_KEYS)
    return b"m:" + hashlib.blake2b(head, digest_size=16).digest()


@dataclass
class EnginePool:
    """All engines, the aliases in front of their models, and the routing decision."""

    engines: list[Engine]
    metrics: GatewayMetrics
    aliases: dict[str, str] = field(default_factory=dict)
    queue_timeout: float = 30.0
    _room: asyncio.Condition = field(default_factory=asyncio.Condition)
    _waiting: int = 0
    _wakeups: set[asyncio.Task[None]] = field(default_factory=set)

    @classmethod
    def from_specs(
        cls,
        specs: Iterable[EngineSpec],
        metrics: GatewayMetrics,
        *,
        default_concurrency: int,
        aliases: dict[str, str],
        queue_timeout: float,
    ) -> EnginePool:
        engines = [
            Engine(spec, concurrency_limit(spec, default_concurrency))
            for spec in specs
            if spec.discover is None  # a discovered group joins when its name first resolves
        ]
        return cls(engines, metrics, dict(aliases), queue_timeout)

    def replace_group(
        self, group: str, specs: Sequence[EngineSpec], default_concurrency: int
    ) -> list[Engine]:
        """Make ``specs`` the engines of one discovered group; return the engines that joined.

        Engines present before and after keep their state (health, load, in-flight calls).
        A new engine starts unhealthy: the caller probes it before it takes traffic.
        """
        current = {engine.name: engine for engine in self.engines if engine.group == group}
        wanted = {spec.label: spec for spec in specs}
        gone = [engine for name, engine in current.items() if name not in wanted]
        added = [
            Engine(spec, concurrency_limit(spec, default_concurrency), group=group)
            for name, spec in wanted.items()
            if name not in current
        ]
        self.engines = [engine for engine in self.engines if engine not in gone] + added
        for engine in gone:
            log.info("engine %s left %s (no longer resolved)", engine.name, group)
            self.metrics.forget_engine(engine.name)
        for engine in added:
            log.info("engine %s joined %s", engine.name, group)
        self.metrics.start_series(engine.name for engine in added)
        return added

    # ---- models

    def served_models(self) -> list[str]:
        """Every model name some engine serves, in engine order, without repeats."""
        return list(dict.fromkeys(m for engine in self.engines for m in engine.models))

    def model_card(self, name: str) -> dict[str, Any] | None:
        """The ``/v1/models`` entry an engine gave for ``name`` (``None`` if none has yet)."""
        for engine in self.engines:
            for card in engine.cards:
                if card.get("id") == name:
                    return card
        return None

    def resolve_model(self, requested: str | None) -> str | None:
        """The served name for a requested model or alias; ``ModelNotFound`` when neither."""
        if requested is None:
            return None
        served = self.aliases.get(requested, requested)
        # An engine whose models are not known yet (never reached), or one not discovered yet,
        # might serve it: let routing answer 503 rather than claim the model does not exist.
        if not self.engines or any(
            served in engine.models or not engine.models for engine in self.engines
        ):
            return served
        raise ModelNotFound(f"the model '{requested}' does not exist", param="model")

    # ---- routing

    def choose(
        self, role: Role, model: str | None, affinity: bytes, exclude: frozenset[str]
    ) -> Engine | None:
        """The engine for a call, or None when every healthy candidate is full."""
        pool = [
            e
            for e in self.engines
            if role in e.roles
            and e.name not in exclude
            and (model is None or model in e.models or not e.models)
        ]
        healthy = [e for e in pool if e.healthy]
        if not healthy:
            raise EngineUnavailable(
                "no healthy engine can serve this request"
                if pool
                else "no other engine is left to try for this request"
            )
        preferred = max(pool, key=lambda e: e.score(affinity))
        if preferred.healthy and preferred.has_room:
            return preferred
        with_room = [e for e in healthy if e.has_room]
        if not with_room:
            return None
        return min(with_room, key=lambda e: (e.load, -e.score(affinity)))

    async def acquire(
        self,
        role: Role,
        model: str | None,
        affinity: bytes,
        exclude: frozenset[str] = frozenset(),
    ) -> Engine:
        """Choose an engine and take one of its slots, waiting while all are full."""
        engine = self.choose(role, model, affinity, exclude)
        if engine is None:
            engine = await self._wait_for_room(role, model, affinity, exclude)
        engine.in_flight += 1
        return engine

    async def _wait_for_room(
        self, role: Role, model: str | None, affinity: bytes, exclude: frozenset[str]
    ) -> Engine:
        # In this task, not under ``wait_for`` (a separate task on Python 3.11): between the
        # choice and ``acquire`` taking the slot nothing may run, or every waiter woken by one
        # release would pick the same freed slot and overrun the engine's limit.
        self._waiting += 1
        try:
            async with asyncio.timeout(self.queue_timeout), self._room:
                while True:
                    await self._room.wait()
                    engine = self.choose(role, model, affinity, exclude)
                    if engine is not None:
                        return engine
        except TimeoutError:
            raise EngineOverloaded(
                f"every engine stayed at its concurrency limit for {self.queue_timeout:g}s"
            ) from None
        finally:
            self._waiting -= 1

    def release(self, engine: Engine) -> None:
        """Give back a slot taken by ``acquire``."""
        engine.in_flight -= 1
        if self._waiting:  # only pay for the wake-up when someone waits
            # Wake all: a waiter may be bound to a model or exclusions the freed engine misses.
            task = asyncio.get_running_loop().create_task(self._notify_all())
            self._wakeups.add(task)
            task.add_done_callback(self._wakeups.discard)

    # ---- health

    def mark_unreachable(self, engine: Engine) -> None:
        """Passive health: a call could not connect, so stop routing there until a probe passes."""
        if engine.healthy:
            log.warning("engine %s unreachable; routing around it", engine.name)
        engine.healthy = False
        self.metrics.engine_state(engine.name, healthy=False, queue_depth=engine.queue_depth)

    def apply(self, engine: Engine, probe: Probe) -> None:
        """Record one health check's outcome (ignored for an engine that left meanwhile)."""
        if engine not in self.engines:
            return
        if probe.healthy != engine.healthy:
            log.info("engine %s is %s", engine.name, "healthy" if probe.healthy else "unhealthy")
        engine.healthy = probe.healthy
        engine.queue_depth = probe.queue_depth
        if probe.models and not engine.spec.model:
            engine.models = probe.models
        if probe.cards:
            engine.cards = probe.cards
        self.metrics.engine_state(engine.name, healthy=probe.healthy, queue_depth=probe.queue_depth)

    async def check_all(self, probe: Callable[[Engine], Awaitable[Probe]]) -> None:
        """Probe every engine once, concurrently."""
        await self.check(list(self.engines), probe)

    async def check(
        self, engines: Sequence[Engine], probe: Callable[[Engine], Awaitable[Probe]]
    ) -> None:
        """Probe these engines once, concurrently, and wake callers waiting for room."""
        results = await asyncio.gather(*(probe(engine) for engine in engines))
        for engine, result in zip(engines, results, strict=True):
            self.apply(engine, result)
        if self._waiting:
            await self._notify_all()

    async def _notify_all(self) -> None:
        async with self._room:
            self._room.notify_all()

    async def run_health_checks(
        self, probe: Callable[[Engine], Awaitable[Probe]], interval: float
    ) -> None:
        """Probe forever, every ``interval`` seconds (a lifespan task, cancelled at shutdown)."""
        while True:
            await asyncio.sleep(interval)
            await self.check_all(probe)

    @property
    def any_healthy(self) -> bool:
        return any(engine.healthy for engine in self.engines)


@dataclass(frozen=True)
class EnginesReady:
    """Ready when at least one engine passed its last health check."""

    pool: EnginePool
    name: str = "engines"

    async def check(self) -> CheckResult:
        healthy = [e.name for e in self.pool.engines if e.healthy]
        total = len(self.pool.engines)
        return CheckResult(bool(healthy), f"{len(healthy)}/{total} healthy")
