"""The rehearsal store: traces, pending imagined observations, session memory and grounding.

Two implementations share one async interface. ``RedisStore`` is what production and the tests
use (redis-py asyncio, bounded timeouts, JSON values); ``InProcessStore``
(``server/store/inprocess.py``) is the embedded default when no Redis URL is configured — it
works for one process only, which the server says at start.

Every failure of the backing server is translated once, here, into ``StoreUnavailable`` (in the
server's error tree, ``server/errors.py``); callers
degrade (rehearsal without memory) rather than fail the request. Key names and lifetimes come
from ``server.store.keys`` and nowhere else.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import orjson
from redis.exceptions import RedisError

from rehearsal_gateway.rehearsal.auto import AUTO_CELLS
from rehearsal_gateway.rehearsal.trust import CELLS

from ..errors import StoreUnavailable
from ..telemetry.waits import waiting
from .connect import RedisClient, connect
from .keys import Keys, Lifetimes, args_hash

JSONObject = dict[str, Any]


class RehearsalStore(Protocol):
    """What the gateway needs from a store; both implementations below satisfy it."""

    kind: str

    async def ping(self) -> None: ...
    async def close(self) -> None: ...
    async def save_trace(self, tenant: str, rehearsal_id: str, trace: JSONObject) -> None: ...
    async def save_settled(
        self, tenant: str, rehearsal_id: str, trace: JSONObject, pending: Mapping[str, JSONObject]
    ) -> None: ...
    async def load_trace(self, tenant: str, rehearsal_id: str) -> JSONObject | None: ...
    async def save_pending(self, tenant: str, tool_call_id: str, record: JSONObject) -> None: ...
    async def take_pending(self, tenant: str, tool_call_id: str) -> JSONObject | None: ...
    async def append_memory(self, tenant: str, session: str, entries: list[JSONObject]) -> None: ...
    async def recent_memory(self, tenant: str, session: str, limit: int) -> list[JSONObject]: ...
    async def save_grounding(
        self, tenant: str, tool: str, canonical_args: str, observation: JSONObject
    ) -> None: ...
    async def grounding(
        self, tenant: str, tool: str, canonical_args: str, limit: int
    ) -> list[JSONObject]: ...
    async def record_trust(self, tenant: str, tool: str, cell: str) -> None: ...
    async def trust_table(self, tenant: str) -> dict[str, dict[str, int]]: ...
    async def record_budget(
        self, tenant: str, tools: tuple[str, ...], cells: tuple[str, ...]
    ) -> None: ...
    async def budget_table(self, tenant: str) -> dict[str, dict[str, int]]: ...


P = ParamSpec("P")

# One imagined x real pair, atomically: bump the tool's cell (when the tool is already known or
# the tenant has room for one more) and the pooled "*" cell, halve a tool's counts once their
# total passes the window (recent evidence dominates), refresh the TTL.
# KEYS[1] trust hash; ARGV: tool, cell, window, ttl_s, max_tools.
TRUST_SCRIPT = """
local key, tool, cell = KEYS[1], ARGV[1], ARGV[2]
local window, ttl, max_tools = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local cells = {"ee", "eo", "oe", "oo", "we", "wo"}
local function fields_of(name)
  local fields = {}
  for i = 1, #cells do fields[i] = name .. ":" .. cells[i] end
  return fields
end
local function bump(name)
  redis.call("HINCRBY", key, name .. ":" .. cell, 1)
  local fields = fields_of(name)
  local values = redis.call("HMGET", key, unpack(fields))
  local total = 0
  for i = 1, #cells do total = total + (tonumber(values[i]) or 0) end
  if total > window then
    for i = 1, #cells do
      redis.call("HSET", key, fields[i], math.floor((tonumber(values[i]) or 0) / 2))
    end
  end
end
local known = false
for _, value in ipairs(redis.call("HMGET", key, unpack(fields_of(tool)))) do
  if value then known = true end
end
if not known then  -- a new tool: admitted while the tenant has fewer than max_tools
  local seen, count = {}, 0
  for _, field in ipairs(redis.call("HKEYS", key)) do
    local name = string.match(field, "^(.*):[eow][eo]$")
    if name and name ~= "*" and not seen[name] then
      seen[name] = true
      count = count + 1
    end
  end
  known = count < max_tools
end
if known then bump(tool) end
bump("*")
redis.call("EXPIRE", key, ttl)
return 1
"""


# One real result of a tool's anchor for the learned budget (rehearsal.auto), as TRUST_SCRIPT:
# bump the given cells of each named row (the tool, its class's pool; each when known or there
# is room) and of "*", halve a row once its samples (n + r) pass the window, refresh the TTL.
# KEYS[1] budget hash; ARGV: window, ttl_s, max_tools, number of rows, row..., cell...
BUDGET_SCRIPT = """
local key = KEYS[1]
local window, ttl, max_tools = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local rows = tonumber(ARGV[4])
local cells = {"n", "f", "r", "rs", "u", "m"}
local function bump(name)
  for i = 5 + rows, #ARGV do redis.call("HINCRBY", key, name .. ":" .. ARGV[i], 1) end
  local fields = {}
  for i = 1, #cells do fields[i] = name .. ":" .. cells[i] end
  local values = redis.call("HMGET", key, unpack(fields))
  if (tonumber(values[1]) or 0) + (tonumber(values[3]) or 0) > window then
    for i = 1, #cells do
      redis.call("HSET", key, fields[i], math.floor((tonumber(values[i]) or 0) / 2))
    end
  end
end
for row = 5, 4 + rows do
  local tool = ARGV[row]
  local known = redis.call("HEXISTS", key, tool .. ":n") == 1
    or redis.call("HEXISTS", key, tool .. ":r") == 1
  if not known then
    local seen, count = {}, 0
    for _, field in ipairs(redis.call("HKEYS", key)) do
      local name = string.match(field, "^(.*):[nfrum]s?$")
      if name and name ~= "*" and not seen[name] then
        seen[name] = true
        count = count + 1
      end
    end
    known = count < max_tools
  end
  if known then bump(tool) end
end
bump("*")
redis.call("EXPIRE", key, ttl)
return 1
"""


def trust_rows(fields: dict[str, int], cells: tuple[str, ...] = CELLS) -> dict[str, dict[str, int]]:
    """``{"tool:cell": n}`` as ``{tool: {cell: n}}`` (tool names may contain colons)."""
    table: dict[str, dict[str, int]] = {}
    for field, count in fields.items():
        tool, _, cell = field.rpartition(":")
        if tool and cell in cells:
            table.setdefault(tool, {})[cell] = count
    return table


R = TypeVar("R")


def _waited(
    method: Callable[Concatenate[RedisStore, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[RedisStore, P], Coroutine[Any, Any, R]]:
    """A Redis round trip: under a connection permit, counted as time the request waited."""

    @functools.wraps(method)
    async def wrapper(store: RedisStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with waiting():
            async with store.permit(method.__name__):
                return await method(store, *args, **kwargs)

    return wrapper


def dump_value(value: JSONObject) -> bytes:
    """A stored value's bytes (both stores keep JSON, never pickles)."""
    return orjson.dumps(value)


def load_value(raw: bytes | str | None) -> JSONObject | None:
    if raw is None:
        return None
    value = orjson.loads(raw)
    return value if isinstance(value, dict) else None


class RedisStore:
    """The store on Redis: one node, a Cluster or a Sentinel'd primary (``server/store/connect``).

    One client, owned by the app's lifespan. Nothing here assumes one node: every command touches
    one key, or keys that share a hash tag (``server/store/keys.py``), so each lands on one slot
    (``save_settled``'s pipeline is not a transaction, so its keys may sit on different slots).

    Every call holds one of ``max_connections`` permits while it runs. redis-py's asyncio pools
    (node, cluster node, Sentinel) do not wait for a free connection: the 65th concurrent
    command fails at once with ``MaxConnectionsError``. That, not a slow Redis, was what marked
    0.1-0.2 % of answers ``degraded`` in a 40 s soak at 64 clients (``benchmarks/soak.py``; all
    failures were ``save_trace: MaxConnectionsError``). A permit is waited for, for at most the
    store's timeout, so a burst queues briefly instead of failing.
    """

    def __init__(
        self,
        url: str,
        *,
        keys: Keys | None = None,
        lifetimes: Lifetimes | None = None,
        timeout_s: float = 1.0,
        max_connections: int = 64,
    ) -> None:
        self.keys = keys or Keys()
        self.lifetimes = lifetimes or Lifetimes()
        self._timeout_s = timeout_s
        self._permits = asyncio.Semaphore(max_connections)
        self._connection = connect(url, timeout_s=timeout_s, max_connections=max_connections)
        self._redis = self._connection.client
        # "redis", "redis-cluster" or "redis-sentinel": what /ready and the start-up line say.
        self.kind = "redis" if self._connection.kind == "node" else f"redis-{self._connection.kind}"
        self._trust_script = self._redis.register_script(TRUST_SCRIPT)
        self._budget_script = self._redis.register_script(BUDGET_SCRIPT)

    @property
    def client(self) -> RedisClient:
        """The one Redis client (the fair-use counters share it, ``server/store/limits.py``)."""
        return self._redis

    @asynccontextmanager
    async def permit(self, op: str) -> AsyncIterator[None]:
        """One connection's worth of Redis, waited for at most the store's timeout."""
        try:
            await asyncio.wait_for(self._permits.acquire(), self._timeout_s)
        except TimeoutError:
            raise StoreUnavailable(op, "every connection busy") from None
        try:
            yield
        finally:
            self._permits.release()

    @_waited
    async def ping(self) -> None:
        try:
            await self._redis.ping()
        except (RedisError, OSError) as exc:
            raise StoreUnavailable("ping", type(exc).__name__) from exc

    async def close(self) -> None:
        await self._connection.aclose()

    @_waited
    async def save_trace(self, tenant: str, rehearsal_id: str, trace: JSONObject) -> None:
        key = self.keys.trace(tenant, rehearsal_id)
        try:
            await self._redis.set(key, dump_value(trace), ex=self.lifetimes.trace_s)
        except (RedisError, OSError) as exc:
            raise StoreUnavailable("save_trace", type(exc).__name__) from exc

    @_waited
    async def save_settled(
        self, tenant: str, rehearsal_id: str, trace: JSONObject, pending: Mapping[str, JSONObject]
    ) -> None:
        """A rehearsal's trace and its committed calls' pending records, in one round trip."""
        life = self.lifetimes
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for tool_call_id, record in pending.items():
                    pipe.set(self.keys.pending(tenant, tool_call_id), dump_value(record),
                             ex=life.pending_s)  # fmt: skip
                pipe.set(self.keys.trace(tenant, rehearsal_id), dump_value(trace), ex=life.trace_s)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            raise StoreUnavailable("save_settled", type(exc).__name__) from exc

    @_waited
    async def load_trace(self, tenant: str, rehearsal_id: str) -> JSONObject | None:
        try:
            raw = await self._redis.get(self.keys.trace(tenant, rehearsal_id))
        except (RedisError, OSError) as exc:
            raise StoreUnavailable("load_trace", type(exc).__name__) from exc
        return load_value(raw)

    @_waited
    async def save_pending(self, tenant: str, tool_call_id: str, record: JSONObject) -> None:
        key = self.keys.pending(tenant, tool_call_id)
        try:
            await self._redis.set(key, dump_value(record), ex=self.lifetimes.pending_s)
        except (RedisError, OSError) as exc:
            raise StoreUnavailable("save_pending", type(exc).__name__) from exc

    @_waited
    async def take_pending(self, tenant: str, tool_call_id: str) -> JSONObject | None:
        # GETDEL is atomic: when replicas race on one tool result, exactly one records it.
        try:
            raw = await self._redis.getdel(self.keys.pending(tenant, tool_call_id))
        except (RedisError, OSError) as exc:
            raise StoreUnavailable("take_pending", type(exc).__name__) from exc
        return load_value(raw)

    @_waited
    async def append_memory(self, tenant: str, session: str, entries: list[JSONObject]) -> None:
        if not entries:
            return
        key = self.keys.memory(tenant, session)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.lpush(key, *[dump_value(entry) for entry in entries])
                pipe.ltrim(key, 0, self.lifetimes.memory_max_entries - 1)
                pipe.expire(key, self.lifetimes.memory_s)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            raise StoreUnavailable("append_memory", type(exc).__name__) from exc

    @_waited
    async def recent_memory(self, tenant: str, session: str, limit: int) -> list[JSONObject]:
        try:
            raws = await self._redis.lrange(self.keys.memory(tenant, session), 0, limit - 1)
        except (RedisError, OSError) as exc:
            raise StoreUnavailable("recent_memory", type(exc).__name__) from exc
        return [entry for raw in raws if (entry := load_value(raw)) is not None]

    @_waited
    async def save_grounding(
        self, tenant: str, tool: str, canonical_args: str, observation: JSONObject
    ) -> None:
        hashed = args_hash(canonical_args)
        key = self.keys.grounding(tenant, tool, hashed)
        recent = self.keys.grounding_recent(tenant, tool)
        ttl = self.lifetimes.grounding_s
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.set(key, dump_value(observation), ex=ttl)
                pipe.lrem(recent, 0, hashed)
                pipe.lpush(recent, hashed)
                pipe.ltrim(recent, 0, self.lifetimes.grounding_max_per_tool - 1)
                pipe.expire(recent, ttl)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            raise StoreUnavailable("save_grounding", type(exc).__name__) from exc

    @_waited
    async def grounding(
        self, tenant: str, tool: str, canonical_args: str, limit: int
    ) -> list[JSONObject]:
        """Real observations of ``tool``: the exact-arguments one first, then the most recent."""
        exact = args_hash(canonical_args)
        try:
            hashes = await self._redis.lrange(self.keys.grounding_recent(tenant, tool), 0, -1)
            recent = [h.decode() if isinstance(h, bytes) else str(h) for h in hashes]
            ordered = [exact] + [h for h in recent if h != exact]
            wanted = ordered[: limit + 1]
            raws = await self._redis.mget([self.keys.grounding(tenant, tool, h) for h in wanted])
        except (RedisError, OSError) as exc:
            raise StoreUnavailable("grounding", type(exc).__name__) from exc
        found = [entry for raw in raws if (entry := load_value(raw)) is not None]
        return found[:limit]

    @_waited
    async def record_trust(self, tenant: str, tool: str, cell: str) -> None:
        life = self.lifetimes
        args: list[str | int] = [tool, cell, life.trust_window, life.trust_s, life.trust_max_tools]
        try:
            await self._trust_script(keys=[self.keys.trust(tenant)], args=args)
        except (RedisError, OSError) as exc:
            raise StoreUnavailable("record_trust", type(exc).__name__) from exc

    @_waited
    async def trust_table(self, tenant: str) -> dict[str, dict[str, int]]:
        try:
            raw = await self._redis.hgetall(self.keys.trust(tenant))
        except (RedisError, OSError) as exc:
            raise StoreUnavailable("trust_table", type(exc).__name__) from exc
        fields = {_text(k): int(v) for k, v in raw.items() if _text(v).lstrip("-").isdigit()}
        return trust_rows(fields)

    @_waited
    async def record_budget(
        self, tenant: str, tools: tuple[str, ...], cells: tuple[str, ...]
    ) -> None:
        life = self.lifetimes
        args: list[str | int] = [life.trust_window, life.trust_s, life.trust_max_tools, len(tools)]
        try:
            await self._budget_script(keys=[self.keys.budget(tenant)], args=[*args, *tools, *cells])
        except (RedisError, OSError) as exc:
            raise StoreUnavailable("record_budget", type(exc).__name__) from exc

    @_waited
    async def budget_table(self, tenant: str) -> dict[str, dict[str, int]]:
        try:
            raw = await self._redis.hgetall(self.keys.budget(tenant))
        except (RedisError, OSError) as exc:
            raise StoreUnavailable("budget_table", type(exc).__name__) from exc
        fields = {_text(k): int(v) for k, v in raw.items() if _text(v).lstrip("-").isdigit()}
        return trust_rows(fields, AUTO_CELLS)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
