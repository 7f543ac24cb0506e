"""The engine pool: which engine serves a call, how much each carries, whether each is alive.

- **Session-affine routing.** A call's affinity key (``X-Session-Id``, else ``user``, else a
  hash of the first messages) picks, by rendezvous score, the engine that holds its prefix cache;
  when that one is unhealthy or full, the least-loaded healthy engine with room takes the call,
  and when all are full it waits up to ``queue_timeout``. A router entry
  (``router=vllm-router``) is one engine that receives the key in the form it hashes on.
- **Rehearsal never takes the room real work needs.** Rehearsal-role calls hold at most
  ``rehearsal_share`` of an engine's slots and never take a freed slot a waiting acting call
  could use: vLLM admits into its batch by ``--max-num-seqs`` whatever the priority, so only the
  gateway can keep room (decision 0011). With ``rehearsal_yield`` an acting call also cancels
  the imaginations running beside it (``yielding.py``, decision 0013). Engines that serve the
  rehearsal role only (``RGW_REHEARSAL_ENGINES``) take imaginations first, so no real work pays.
- **Health that does not lie about a busy engine**: passive ejection after ``eject_after``
  failed calls, active probes excused while real traffic flows (``health.py``), canaries for an
  engine hung behind ``/health`` (``stalls.py``, decision 0105). Calls waiting on an engine taken
  out as hung or stalled are aborted at once, so they move elsewhere or answer 504.
- **Engines may change while serving**: ``replace_group`` swaps one discovered group; calls in
  flight on a departed engine finish there.

The pool holds no HTTP client: probes and canaries are functions handed to it. The whole story,
with every setting: docs/gateway.md (Routing; Faults).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..errors import EngineOverloaded, EngineUnavailable, ModelNotFound
from ..settings import EngineSpec, Role
from ..telemetry.metrics import GatewayMetrics
from .engine import (
    ROUTER_CONCURRENCY,
    Engine,
    Probe,
    concurrency_limit,
    rehearsal_slots,
)
from .health import EnginesReady, PoolHealth

__all__ = ["ROUTER_CONCURRENCY", "Engine", "EnginePool", "EnginesReady", "Probe", "affinity_key"]

log = logging.getLogger("rehearsal_gateway.engines")


def affinity_key(session_id: str | None, user: str | None, messages: Sequence[object]) -> bytes:
    """The routing key of a call: session header > ``user`` > the first two messages."""
    if session_id:
        return b"s:" + session_id.encode()
    if user:
        return b"u:" + user.encode()
    head = orjson.dumps(list(messages[:2]), option=orjson.OPT_SORT_KEYS)
    return b"m:" + hashlib.blake2b(head, digest_size=16).digest()


@dataclass(frozen=True, slots=True, eq=False)  # one per waiter: removed by identity
class _WaitingWork:
    """An acting call waiting for a slot: which engines it could take one on."""

    model: str | None
    exclude: frozenset[str]
    slots: int = 1

    def could_use(self, engine: Engine) -> bool:
        return (
            "act" in engine.roles
            and engine.healthy
            and engine.name not in self.exclude
            and (self.model is None or self.model in engine.models or not engine.models)
        )


@dataclass
class EnginePool(PoolHealth):
    """All engines, the aliases in front of their models, and the routing decision."""

    engines: list[Engine]
    metrics: GatewayMetrics
    aliases: dict[str, str] = field(default_factory=dict)
    queue_timeout: float = 30.0
    eject_after: int = 1  # consecutive failed calls that take an engine out
    health_failures: int = 1  # consecutive failed probes that take an engine out
    rehearsal_share: float = 1.0  # of each engine's slots, what rehearsal-role calls may hold
    rehearsal_yield: bool = False  # real work preempts imaginations (module docstring)
    rehearsal_yield_quiet_s: float = 0.05  # how long after real work imaginations start again
    _wake_at: float = 0.0  # when the scheduled wake-up of waiters held back by real work runs
    _room: asyncio.Condition = field(default_factory=asyncio.Condition)
    _waiting: int = 0
    _waiting_work: list[_WaitingWork] = field(default_factory=list)  # acting calls only
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
        eject_after: int = 1,
        health_failures: int = 1,
        rehearsal_share: float = 1.0,
        rehearsal_yield: bool = False,
        rehearsal_yield_quiet_s: float = 0.05,
    ) -> EnginePool:
        pool = cls(
            [],
            metrics,
            aliases=dict(aliases),
            queue_timeout=queue_timeout,
            eject_after=eject_after,
            health_failures=health_failures,
            rehearsal_share=rehearsal_share,
            rehearsal_yield=rehearsal_yield,
            rehearsal_yield_quiet_s=rehearsal_yield_quiet_s,
        )
        pool.engines = [
            pool._engine(spec, default_concurrency)
            for spec in specs
            if spec.discover is None  # a discovered group joins when its name first resolves
        ]
        return pool

    def _engine(self, spec: EngineSpec, default_concurrency: int, group: str = "") -> Engine:
        limit = concurrency_limit(spec, default_concurrency)
        share = rehearsal_slots(spec, limit, self.rehearsal_share)
        return Engine(spec, limit, rehearse_limit=share, group=group)

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
            self._engine(spec, default_concurrency, group)
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

    @property
    def keyed(self) -> bool:
        """Whether a call's affinity key can change where it lands: more than one engine of real
        work to choose among, or a router that hashes the key itself. With one plain engine (the
        common deployment) a pass-through needs none, and building it (the first two messages in
        canonical JSON, hashed) is work on every request (docs/decisions/0008)."""
        engines = self.engines
        if len(engines) != 1:  # the engines of real work are the ones a pass-through may take
            engines = [e for e in engines if "act" in e.roles]
        return len(engines) != 1 or engines[0].router is not None

    def choose(
        self,
        role: Role,
        model: str | None,
        affinity: bytes,
        exclude: frozenset[str],
        samples: int = 1,
        candidates: int = 0,
        owner: object | None = None,
    ) -> Engine | None:
        """The engine for a call, or None when every healthy candidate is full (for ``role``)."""
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
        if role == "rehearse" and len(pool) > 1:
            # Engines that serve imagination only (the rehearsal set) take it first; the engines
            # of real work only when none of those is healthy with room, within their share.
            own = [e for e in pool if "act" not in e.roles]
            if own and len(own) < len(pool):
                mine = [e for e in own if e.healthy]
                engine = self._pick(role, own, mine, affinity, samples, candidates, owner)
                if engine is not None:
                    return engine
                pool = [e for e in pool if "act" in e.roles]
                healthy = [e for e in healthy if "act" in e.roles]
        return self._pick(role, pool, healthy, affinity, samples, candidates, owner)

    def _pick(
        self,
        role: Role,
        pool: list[Engine],
        healthy: list[Engine],
        affinity: bytes,
        samples: int,
        candidates: int,
        owner: object | None,
    ) -> Engine | None:
        """Of ``pool``, the preferred engine for ``affinity`` if it has room, else the least
        loaded of the ``healthy`` with room; None when none has."""
        # One engine to choose from (the common deployment): no hash to rank it by.
        preferred = pool[0] if len(pool) == 1 else max(pool, key=lambda e: e.score(affinity))
        with_room = [e for e in healthy if self._open_to(role, e, samples, candidates, owner)]
        if preferred in with_room:
            return preferred
        if not with_room:
            return None
        return min(with_room, key=lambda e: (e.load, -e.score(affinity)))

    def _open_to(
        self,
        role: Role,
        engine: Engine,
        samples: int = 1,
        candidates: int = 0,
        owner: object | None = None,
    ) -> bool:
        """Whether a call of ``role`` may take its slots of ``engine`` now.

        A rehearsal call also leaves the free slots that waiting acting calls could take: real
        work queued first is served first, whichever call began to wait earlier; and, when
        imagination yields, it waits while others' real work runs on the engine.
        """
        if not engine.has_room_for(role, samples, candidates):
            return False
        if role != "rehearse":
            return True
        if self.rehearsal_yield:
            wait = engine.real.wait_for(owner, time.monotonic(), self.rehearsal_yield_quiet_s)
            if wait is not None:
                if wait > 0:
                    self._wake_in(wait)
                return False
        if not self._waiting_work:
            return True
        wanted = sum(work.slots for work in self._waiting_work if work.could_use(engine))
        return engine.free_slots - engine.slots_for(role, samples)[0] >= wanted

    async def acquire(
        self,
        role: Role,
        model: str | None,
        affinity: bytes,
        exclude: frozenset[str] = frozenset(),
        within: float | None = None,
        samples: int = 1,
        candidates: int = 0,
        owner: object | None = None,
    ) -> Engine:
        """Choose an engine and take its slots for the call, waiting while all are full.

        A call asking for ``samples`` choices takes one slot per choice, rehearsal's part of them
        (``candidates`` of an acting call's) held to its share (``Engine.slots_for``).
        The wait is ``queue_timeout``, or ``within`` (what is left of the call's own bound)
        when that is shorter: a request queues within its deadline, never past it.
        ``owner``: the rehearsal the call is part of, if any (yielding, module docstring); an
        acting call that takes its slots preempts the others' imaginations on that engine.
        """
        engine = self.choose(role, model, affinity, exclude, samples, candidates, owner)
        if engine is None:
            wait = self.queue_timeout if within is None else min(within, self.queue_timeout)
            engine = await self._wait_for_room(
                role, model, affinity, exclude, max(wait, 0.0), samples, candidates, owner
            )
        slots, share = engine.slots_for(role, samples, candidates)
        engine.in_flight += slots
        engine.rehearse_in_flight += share
        if self.rehearsal_yield and role != "rehearse":  # real work is only tracked for it
            engine.real.began(owner)
            if engine.real.yielding:
                preempted = engine.real.preempt_for(owner)
                if preempted:
                    self.metrics.rehearsal_preempted(engine.name, preempted)
        return engine

    async def _wait_for_room(
        self,
        role: Role,
        model: str | None,
        affinity: bytes,
        exclude: frozenset[str],
        wait: float,
        samples: int,
        candidates: int,
        owner: object | None,
    ) -> Engine:
        # In this task, not under ``wait_for`` (a separate task on Python 3.11): between the
        # choice and ``acquire`` taking the slot nothing may run, or every waiter woken by one
        # release would pick the same freed slot and overrun the engine's limit.
        self._waiting += 1
        work = None if role == "rehearse" else _WaitingWork(model, exclude, max(samples, 1))
        if work is not None:
            self._waiting_work.append(work)
        try:
            async with asyncio.timeout(wait), self._room:
                while True:
                    await self._room.wait()
                    engine = self.choose(role, model, affinity, exclude, samples, candidates, owner)
                    if engine is not None:
                        return engine
        except TimeoutError:
            raise EngineOverloaded(
                f"every engine stayed at its concurrency limit for {wait:g}s"
            ) from None
        finally:
            self._waiting -= 1
            if work is not None:
                self._waiting_work.remove(work)

    def release(
        self,
        engine: Engine,
        role: Role,
        samples: int = 1,
        candidates: int = 0,
        owner: object | None = None,
    ) -> None:
        """Give back the slots ``acquire`` took for the same arguments."""
        slots, share = engine.slots_for(role, samples, candidates)
        engine.in_flight -= slots
        engine.rehearse_in_flight -= share
        if self.rehearsal_yield and role != "rehearse":
            engine.real.finished(owner, time.monotonic())
        if self._waiting:  # only pay for the wake-up when someone waits
            # Wake all: a waiter may be bound to a model or exclusions the freed engine misses.
            self._wake()

    def _wake_in(self, delay: float) -> None:
        """Wake the waiters in ``delay`` seconds (real work's quiet period ends then)."""
        loop = asyncio.get_running_loop()
        at = time.monotonic() + delay
        if self._wake_at > time.monotonic() and self._wake_at <= at:
            return  # an earlier wake-up is already due; the waiters look again then
        self._wake_at = at
        loop.call_later(delay, self._wake)

    def _wake(self) -> None:
        if self._waiting:
            task = asyncio.get_running_loop().create_task(self._notify_all())
            self._wakeups.add(task)
            task.add_done_callback(self._wakeups.discard)
