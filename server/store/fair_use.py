"""Fair use per API key (tenant): request rate, requests in flight, rehearsal engine calls, cost.

Four limits, each off unless configured (``RGW_LIMIT_*``, per-tenant ``RGW_LIMIT_OVERRIDES``;
docs/limits.md):

- **rate**: a token bucket of ``burst`` requests refilled at ``rps`` per second, taken by every
  ``/v1/`` request (``server/http/limits.py``);
- **concurrency**: at most ``concurrency`` requests of the key in flight, held from the first
  byte in to the last byte out (a stream's too), as leases that expire after ``lease_s``;
- **engine_calls**: a bucket of ``engine_calls_per_min`` rehearsal engine calls refilled over a
  minute. A rehearsal is admitted while the bucket holds a call and is charged, when it settles,
  every engine call it made (the count is known only then); a key in debt waits for the refill;
- **max_cost**: ``budget x depth`` of one rehearsal. Over it is a 400 naming the knob, like the
  gateway-wide caps (never clamped: a silently cheaper rehearsal is a different rehearsal).

The first three answer 429 (``RateLimited``: OpenAI's envelope, ``Retry-After``). Counts live in
the store's Redis (``server/store/limits.py``), so every replica shares them; with the in-process
store they hold for one process. **Fail open**: when the store cannot answer a check, the request
is let through (counted in ``rehearsal_gateway_limits_failed_open_total``) and limits are skipped
for ``fail_open_s``, so a Redis outage costs neither a 500 nor a timeout per request. Fair use
is worth less than serving.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from ..errors import InvalidRequest, RateLimited, StoreUnavailable
from ..settings import GatewaySettings, TenantLimits
from ..telemetry.metrics import GatewayMetrics
from .backends import RedisStore, RehearsalStore
from .keys import Keys
from .limits import (
    InProcessLimitCounters,
    LimitCounters,
    RedisLimitCounters,
)

log = logging.getLogger("rehearsal_gateway.server")


@dataclass(frozen=True, slots=True)
class Limits:
    """One tenant's effective limits (0: off)."""

    rps: float = 0.0
    burst: int = 0
    concurrency: int = 0
    engine_calls_per_min: int = 0
    max_cost: int = 0

    @property
    def bucket(self) -> int:
        return self.burst or max(1, round(2 * self.rps))

    @property
    def any(self) -> bool:
        return bool(self.rps or self.concurrency or self.engine_calls_per_min or self.max_cost)


def _merged(base: Limits, override: TenantLimits | None) -> Limits:
    if override is None:
        return base
    return Limits(
        rps=base.rps if override.rps is None else override.rps,
        burst=base.burst if override.burst is None else override.burst,
        concurrency=base.concurrency if override.concurrency is None else override.concurrency,
        engine_calls_per_min=(
            base.engine_calls_per_min
            if override.engine_calls_per_min is None
            else override.engine_calls_per_min
        ),
        max_cost=base.max_cost if override.max_cost is None else override.max_cost,
    )


def counters_for(store: RehearsalStore) -> LimitCounters:
    """Redis counters on a Redis store's client; in-process ones beside the in-process store."""
    return RedisLimitCounters(store) if isinstance(store, RedisStore) else InProcessLimitCounters()


class FairUse:
    """The per-key limits and the checks the HTTP edge and rehearsal make against them."""

    def __init__(
        self,
        counters: LimitCounters,
        metrics: GatewayMetrics,
        *,
        defaults: Limits,
        overrides: dict[str, TenantLimits] | None = None,
        keys: Keys | None = None,
        lease_s: float = 900.0,
        fail_open_s: float = 5.0,
    ) -> None:
        self.counters = counters
        self.metrics = metrics
        self.defaults = defaults
        self.overrides = overrides or {}
        self.keys = keys or Keys()
        self.lease_s = lease_s
        self.fail_open_s = fail_open_s
        self._skip_until = 0.0

    @classmethod
    def from_settings(
        cls, settings: GatewaySettings, store: RehearsalStore, metrics: GatewayMetrics
    ) -> FairUse:
        defaults = Limits(
            rps=settings.limit_rps,
            burst=settings.limit_burst,
            concurrency=settings.limit_concurrency,
            engine_calls_per_min=settings.limit_engine_calls_per_min,
            max_cost=settings.limit_max_cost,
        )
        return cls(
            counters_for(store),
            metrics,
            defaults=defaults,
            overrides=dict(settings.limit_overrides),
            keys=Keys(prefix=settings.redis_prefix),
            lease_s=settings.limit_lease_s,
            fail_open_s=settings.limit_fail_open_s,
        )

    @property
    def enabled(self) -> bool:
        return self.defaults.any or any(
            _merged(self.defaults, o).any for o in self.overrides.values()
        )

    def limits(self, tenant: str) -> Limits:
        return _merged(self.defaults, self.overrides.get(tenant))

    def _skipping(self) -> bool:
        return time.monotonic() < self._skip_until

    def _failed_open(self, exc: StoreUnavailable) -> None:
        self.metrics.limit_failed_open()
        self.metrics.store_error(exc.op)
        self._skip_until = time.monotonic() + self.fail_open_s
        log.warning("fair-use limits skipped for %.1f s: %s", self.fail_open_s, exc.message)

    def _refuse(self, limit: str, wait_s: float, message: str) -> RateLimited:
        self.metrics.limited(limit)
        return RateLimited(message, limit=limit, retry_after_s=wait_s)

    async def enter(self, tenant: str, request_id: str) -> bool:
        """Admit one request (rate, then concurrency); ``True`` when a lease must be left."""
        limits = self.limits(tenant)
        if not (limits.rps or limits.concurrency) or self._skipping():
            return False
        try:
            if limits.rps:
                key = self.keys.limit(tenant, "rate")
                wait = await self.counters.take(key, limits.bucket, limits.rps, 1)
                if wait:
                    raise self._refuse(
                        "rate", wait, f"rate limit: {limits.rps:g} requests/s for this key"
                    )
            if limits.concurrency:
                key = self.keys.limit(tenant, "inflight")
                wait = await self.counters.enter(key, request_id, limits.concurrency, self.lease_s)
                if wait:
                    raise self._refuse(
                        "concurrency", wait,
                        f"concurrency limit: {limits.concurrency} requests in flight for this key",
                    )  # fmt: skip
                return True
        except StoreUnavailable as exc:
            self._failed_open(exc)
        return False

    async def leave(self, tenant: str, request_id: str) -> None:
        """Free a request's lease (a failure leaves it to expire)."""
        try:
            await self.counters.leave(self.keys.limit(tenant, "inflight"), request_id)
        except StoreUnavailable as exc:
            self._failed_open(exc)

    async def admit_rehearsal(self, tenant: str, budget: int, depth: int) -> None:
        """Refuse a rehearsal over the key's cost cap (400) or out of engine calls (429)."""
        limits = self.limits(tenant)
        if limits.max_cost and budget * depth > limits.max_cost:
            self.metrics.limited("budget_depth")
            raise InvalidRequest(
                f"rehearsal budget x depth = {budget * depth} is over this key's cap of "
                f"{limits.max_cost}",
                param="rehearsal.budget",
            )
        if not limits.engine_calls_per_min or self._skipping():
            return
        per_min = limits.engine_calls_per_min
        try:
            wait = await self.counters.take(
                self.keys.limit(tenant, "calls"), per_min, per_min / 60.0, 0
            )
        except StoreUnavailable as exc:
            self._failed_open(exc)
            return
        if wait:
            raise self._refuse(
                "engine_calls", wait, f"rehearsal limit: {per_min} engine calls/min for this key"
            )

    async def charge(self, tenant: str, calls: int) -> None:
        """Charge a finished rehearsal's engine calls (may leave the key in debt)."""
        per_min = self.limits(tenant).engine_calls_per_min
        if not per_min or calls <= 0 or self._skipping():
            return
        try:
            await self.counters.take(
                self.keys.limit(tenant, "calls"), per_min, per_min / 60.0, calls, force=True
            )
        except StoreUnavailable as exc:
            self._failed_open(exc)
