"""Per-key fair-use counters: token buckets and in-flight leases, in Redis or in process.

Two primitives serve every limit of ``server/http/limits.py``:

- a **token bucket** (``take``): ``capacity`` tokens refilled at ``rate`` per second; a take of
  ``cost`` succeeds while the bucket holds at least one token (always, with ``force``) and may
  drive it below zero (a debt), so a cost known only afterwards (a rehearsal's engine calls) is
  charged in full and the next request waits until the debt is refilled. The answer is 0
  (taken) or the seconds until a take would succeed (the ``Retry-After``);
- an **in-flight lease set** (``enter``/``leave``): at most ``limit`` request ids per key, each
  lease expiring after ``lease_s`` so that a replica that died mid-request frees its slots.

On Redis each is one Lua script on one key (tagged ``{tenant}``, ``server/store/keys.py``), timed
by the server's clock (``TIME``), so all replicas share the counts and agree on time. The
in-process versions do the same for one process. Failures surface as ``StoreUnavailable``; the
caller fails open.
"""

from __future__ import annotations

import math
import time
from typing import Protocol

from redis.exceptions import RedisError

from ..errors import StoreUnavailable
from .backends import RedisStore
from .keys import Keys

# KEYS[1] bucket hash {tokens, ts_ms}; ARGV: capacity, rate per s, cost, force (1: charge anyway).
# Returns 0 when taken, else the milliseconds until the bucket holds one token again.
BUCKET_SCRIPT = """
local key = KEYS[1]
local capacity, rate, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local force = ARGV[4] == "1"
local now = redis.call("TIME")
local now_ms = now[1] * 1000 + math.floor(now[2] / 1000)
local state = redis.call("HMGET", key, "tokens", "ts")
local tokens, ts = tonumber(state[1]), tonumber(state[2])
if tokens == nil then tokens, ts = capacity, now_ms end
tokens = math.min(capacity, tokens + (now_ms - ts) * rate / 1000)
local wait = 0
if tokens >= 1 or force then
  tokens = tokens - cost
else
  wait = math.ceil((1 - tokens) * 1000 / rate)
end
redis.call("HSET", key, "tokens", tostring(tokens), "ts", now_ms)
redis.call("PEXPIRE", key, math.ceil((capacity - math.min(tokens, 0) + 1) * 1000 / rate))
return wait
"""

# KEYS[1] sorted set id -> lease end (ms); ARGV: id, limit, lease_ms.
# Returns 0 when entered, else the milliseconds until the oldest lease ends.
LEASE_SCRIPT = """
local key, id = KEYS[1], ARGV[1]
local limit, lease = tonumber(ARGV[2]), tonumber(ARGV[3])
local now = redis.call("TIME")
local now_ms = now[1] * 1000 + math.floor(now[2] / 1000)
redis.call("ZREMRANGEBYSCORE", key, "-inf", now_ms)
if redis.call("ZCARD", key) >= limit then
  local oldest = redis.call("ZRANGE", key, 0, 0, "WITHSCORES")
  return math.max(1, tonumber(oldest[2]) - now_ms)
end
redis.call("ZADD", key, now_ms + lease, id)
redis.call("PEXPIRE", key, lease)
return 0
"""


class LimitCounters(Protocol):
    """What the fair-use policy needs from a backend; both classes below satisfy it."""

    async def take(
        self, key: str, capacity: float, rate: float, cost: float, *, force: bool = False
    ) -> float: ...
    async def enter(self, key: str, request_id: str, limit: int, lease_s: float) -> float: ...
    async def leave(self, key: str, request_id: str) -> None: ...


class RedisLimitCounters:
    """The counters in Redis, on the store's client (and under its connection permits)."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self.keys: Keys = store.keys
        self._bucket = store.client.register_script(BUCKET_SCRIPT)
        self._lease = store.client.register_script(LEASE_SCRIPT)

    async def take(
        self, key: str, capacity: float, rate: float, cost: float, *, force: bool = False
    ) -> float:
        async with self.store.permit("limits"):
            try:
                args: list[float | int] = [capacity, rate, cost, int(force)]
                wait_ms = await self._bucket(keys=[key], args=args)
            except (RedisError, OSError) as exc:
                raise StoreUnavailable("limits", type(exc).__name__) from exc
        return int(wait_ms) / 1000.0

    async def enter(self, key: str, request_id: str, limit: int, lease_s: float) -> float:
        async with self.store.permit("limits"):
            try:
                args: list[str | int] = [request_id, limit, int(lease_s * 1000)]
                wait_ms = await self._lease(keys=[key], args=args)
            except (RedisError, OSError) as exc:
                raise StoreUnavailable("limits", type(exc).__name__) from exc
        return int(wait_ms) / 1000.0

    async def leave(self, key: str, request_id: str) -> None:
        async with self.store.permit("limits"):
            try:
                await self.store.client.zrem(key, request_id)
            except (RedisError, OSError) as exc:
                raise StoreUnavailable("limits", type(exc).__name__) from exc


class InProcessLimitCounters:
    """The same counters in one process (the in-process store's companion)."""

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)
        self._leases: dict[str, dict[str, float]] = {}  # key -> id -> lease end

    async def take(
        self, key: str, capacity: float, rate: float, cost: float, *, force: bool = False
    ) -> float:
        now = time.monotonic()
        tokens, at = self._buckets.get(key, (capacity, now))
        tokens = min(capacity, tokens + (now - at) * rate)
        wait = 0.0
        if tokens >= 1 or force:
            tokens -= cost
        else:
            wait = math.ceil((1 - tokens) * 1000 / rate) / 1000.0
        self._buckets[key] = (tokens, now)
        if len(self._buckets) > 100_000:  # keys are tenants; bounded all the same
            self._buckets.pop(next(iter(self._buckets)))
        return wait

    async def enter(self, key: str, request_id: str, limit: int, lease_s: float) -> float:
        now = time.monotonic()
        leases = {i: end for i, end in self._leases.get(key, {}).items() if end > now}
        self._leases[key] = leases
        if len(leases) >= limit:
            return max(0.001, min(leases.values()) - now)
        leases[request_id] = now + lease_s
        return 0.0

    async def leave(self, key: str, request_id: str) -> None:
        leases = self._leases.get(key)
        if leases is not None:
            leases.pop(request_id, None)
            if not leases:
                del self._leases[key]
