"""Opening the rehearsal store from settings: Redis when a URL is set, else in-process.

Also the store's readiness check (not critical: without the store the gateway still serves).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..errors import StoreUnavailable
from ..settings import GatewaySettings
from ..telemetry.readiness import CheckResult
from .backends import RedisStore, RehearsalStore
from .inprocess import InProcessStore
from .keys import Keys, Lifetimes

log = logging.getLogger("rehearsal_gateway.server")

IN_PROCESS_NOTE = (
    "no Redis URL configured: using the in-process rehearsal store "
    "(memory, traces and grounding live in this process only and are lost on restart)"
)


def lifetimes(settings: GatewaySettings) -> Lifetimes:
    return settings.values_for(
        Lifetimes,
        trace_s=settings.trace_ttl_s,
        pending_s=settings.pending_ttl_s,
        memory_s=settings.memory_ttl_s,
        grounding_s=settings.grounding_ttl_s,
        trust_s=settings.trust_ttl_s,
    )


def open_store(settings: GatewaySettings) -> RehearsalStore:
    """Redis when a URL is configured, else the embedded in-process store (said in the log)."""
    if settings.redis_url is None:
        log.warning(IN_PROCESS_NOTE)
        return InProcessStore(
            lifetimes=lifetimes(settings),
            max_keys=settings.inprocess_max_keys,
            max_bytes=settings.inprocess_max_bytes,
        )
    return RedisStore(
        settings.redis_url.get_secret_value(),
        keys=Keys(prefix=settings.redis_prefix),
        lifetimes=lifetimes(settings),
        timeout_s=settings.redis_timeout,
    )


@dataclass(frozen=True)
class StoreReady:
    """The store answers a ping (the in-process store always does). Not critical: see readiness."""

    store: RehearsalStore
    name: str = "store"
    critical: bool = False  # without the store the gateway still serves, degraded

    async def check(self) -> CheckResult:
        try:
            await self.store.ping()
        except StoreUnavailable as exc:
            return CheckResult(False, f"{self.store.kind}: {exc.message}")
        return CheckResult(True, self.store.kind)
