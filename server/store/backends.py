"""The rehearsal store: traces, pending imagined observations, session memory and grounding.

Two implementations share one async interface. ``RedisStore`` is what production and the tests
use (redis-py asyncio, bounded timeouts, JSON values); ``InProcessStore`` is the embedded default
when no Redis URL is configured — it works for one process only, which the server says at start.

Every failure of the backing server is translated once, here, into ``StoreUnavailable`` (in the
server's error tree, ``server/errors.py``); callers
degrade (rehearsal without memory) rather than fail the request. Key names and lifetimes come
from ``server.store.keys`` and nowhere else.
"""

from __future__ import annotations

import functools
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, Protocol, TypeVar

import orjson
from redis.exceptions import RedisError

from server.errors import StoreUnavailable
from server.store.connect import connect
from server.store.keys import Keys, Lifetimes, args_hash
from server.telemetry.waits import waiting

JSONObject = dict[str, Any]


class RehearsalStore(Protocol):
    """What the gateway needs from a store; both implementations below satisfy it."""

    kind: str

    async def ping(self) -> None: ...
    async def close(self) -> None: ...
    async def save_trace(self, tenant: str, rehearsal_id: str, trace: JSONObject) -> None: ...
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


P = ParamSpec("P")

# One imagined x real pair, atomically: bump the tool's cell (when the tool is already known or
# the tenant has room for one more) and the pooled "*" cell, halve a tool's counts once their
# total passes the window (recent evidence dominates), refresh the TTL.
# KEYS[1] trust hash; ARGV: tool, cell, window, ttl_s, max_tools.
TRUST_SCRIPT = """
local key, tool, cell = KEYS[1], ARGV[1], ARGV[2]
local window, ttl, max_tools = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local cells = {"ee", "eo", "oe", "oo"}
local function fields_of(name)
  local fields = {}
  for i = 1, 4 do fields[i] = name .. ":" .. cells[i] end
  return fields
end
local function bump(name)
  redis.call("HINCRBY", key, name .. ":" .. cell, 1)
  local fields = fields_of(name)
  local values = redis.call("HMGET", key, unpack(fields))
  local total = 0
  for i = 1, 4 do total = total + (tonumber(values[i]) or 0) end
  if total > window then
    for i = 1, 4 do
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
    local name = string.match(field, "^(.*):[eo][eo]$")
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


def trust_rows(fields: dict[str, int]) -> dict[str, dict[str, int]]:
    """``{"tool:cell": n}`` as ``{tool: {cell: n}}`` (tool names may contain colons)."""
    table: dict[str, dict[str, int]] = {}
    for field, count in fields.items():
        tool, _, cell = field.rpartition(":")
        if tool and cell in ("ee", "eo", "oe", "oo"):
            table.setdefault(tool, {})[cell] = count
    return table


R = TypeVar("R")


def _waited(method: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    """Count a Redis round trip as time the request spent waiting (not gateway overhead)."""

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with waiting():
            return await method(*args, **kwargs)

    return wrapper


def _dumps(value: JSONObject) -> bytes:
    return orjson.dumps(value)


def _loads(raw: bytes | str | None) -> JSONObject | None:
    if raw is None:
        return None
    value = orjson.loads(raw)
    return value if isinstance(value, dict) else None


class RedisStore:
    """The store on Redis: one node, a Cluster or a Sentinel'd primary (``server/store/connect``).

    One client, owned by the app's lifespan. Nothing here assumes one node: every command touches
    one key, or keys that share a hash tag (``server/store/keys.py``), so each lands on one slot.
    """

    def __init__(
        self,
        url: str,
        *,
        keys: Keys | None = None,
        lifetimes: Lifetimes | None = None,
        timeout_s: float = 0.25,
        max_connections: int = 64,
    ) -> None:
        self.keys = keys or Keys()
        self.lifetimes = lifetimes or Lifetimes()
        self._connection = connect(url, timeout_s=timeout_s, max_connections=max_connections)
        self._redis = self._connection.client
        # "redis", "redis-cluster" or "redis-sentinel": what /ready and the start-up line say.
        self.kind = "redis" if self._connection.kind == "node" else f"redis-{self._connection.kind}"
        self._trust_script = self._redis.register_script(TRUST_SCRIPT)

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
            await self._redis.set(key, _dumps(trace), ex=self.lifetimes.trace_s)
        except (RedisError, OSError) as exc:
            raise StoreUnavailable("save_trace", type(exc).__name__) from exc

    @_waited
    async def load_trace(self, tenant: str, rehearsal_id: str) -> JSONObject | None:
        try:
            raw = await self._redis.get(self.keys.trace(tenant, rehearsal_id))
        except (RedisError, OSError) as exc:
            raise StoreUnavailable("load_trace", type(exc).__name__) from exc
        return _loads(raw)

    @_waited
    async def save_pending(self, tenant: str, tool_call_id: str, record: JSONObject) -> None:
        key = self.keys.pending(tenant, tool_call_id)
        try:
            await self._redis.set(key, _dumps(record), ex=self.lifetimes.pending_s)
        except (RedisError, OSError) as exc:
            raise StoreUnavailable("save_pending", type(exc).__name__) from exc

    @_waited
    async def take_pending(self, tenant: str, tool_call_id: str) -> JSONObject | None:
        # GETDEL is atomic: when replicas race on one tool result, exactly one records it.
        try:
            raw = await self._redis.getdel(self.keys.pending(tenant, tool_call_id))
        except (RedisError, OSError) as exc:
            raise StoreUnavailable("take_pending", type(exc).__name__) from exc
        return _loads(raw)

    @_waited
    async def append_memory(self, tenant: str, session: str, entries: list[JSONObject]) -> None:
        if not entries:
            return
        key = self.keys.memory(tenant, session)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.lpush(key, *[_dumps(entry) for entry in entries])
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
        return [entry for raw in raws if (entry := _loads(raw)) is not None]

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
                pipe.set(key, _dumps(observation), ex=ttl)
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
        found = [entry for raw in raws if (entry := _loads(raw)) is not None]
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


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class InProcessStore:
    """The embedded default: the same behaviour in one process's memory, with TTLs honoured."""

    kind = "in-process"

    def __init__(self, *, lifetimes: Lifetimes | None = None, max_keys: int = 100_000) -> None:
        self.lifetimes = lifetimes or Lifetimes()
        self._keys = Keys()
        self._max_keys = max_keys
        self._data: OrderedDict[str, tuple[float, Any]] = OrderedDict()

    def _get(self, key: str) -> Any:
        item = self._data.get(key)
        if item is None:
            return None
        expires_at, value = item
        if expires_at <= time.monotonic():
            del self._data[key]
            return None
        return value

    def _set(self, key: str, value: Any, ttl_s: int) -> None:
        self._data[key] = (time.monotonic() + ttl_s, value)
        self._data.move_to_end(key)
        while len(self._data) > self._max_keys:  # bounded memory: oldest writes go first
            self._data.popitem(last=False)

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        self._data.clear()

    async def save_trace(self, tenant: str, rehearsal_id: str, trace: JSONObject) -> None:
        self._set(self._keys.trace(tenant, rehearsal_id), _dumps(trace), self.lifetimes.trace_s)

    async def load_trace(self, tenant: str, rehearsal_id: str) -> JSONObject | None:
        return _loads(self._get(self._keys.trace(tenant, rehearsal_id)))

    async def save_pending(self, tenant: str, tool_call_id: str, record: JSONObject) -> None:
        self._set(
            self._keys.pending(tenant, tool_call_id), _dumps(record), self.lifetimes.pending_s
        )

    async def take_pending(self, tenant: str, tool_call_id: str) -> JSONObject | None:
        key = self._keys.pending(tenant, tool_call_id)
        value = self._get(key)
        self._data.pop(key, None)
        return _loads(value)

    async def append_memory(self, tenant: str, session: str, entries: list[JSONObject]) -> None:
        if not entries:
            return
        key = self._keys.memory(tenant, session)
        current: list[bytes] = self._get(key) or []
        fresh = [_dumps(entry) for entry in reversed(entries)] + current
        self._set(key, fresh[: self.lifetimes.memory_max_entries], self.lifetimes.memory_s)

    async def recent_memory(self, tenant: str, session: str, limit: int) -> list[JSONObject]:
        raws: list[bytes] = self._get(self._keys.memory(tenant, session)) or []
        return [entry for raw in raws[:limit] if (entry := _loads(raw)) is not None]

    async def save_grounding(
        self, tenant: str, tool: str, canonical_args: str, observation: JSONObject
    ) -> None:
        hashed = args_hash(canonical_args)
        ttl = self.lifetimes.grounding_s
        self._set(self._keys.grounding(tenant, tool, hashed), _dumps(observation), ttl)
        recent_key = self._keys.grounding_recent(tenant, tool)
        recent: list[str] = [h for h in (self._get(recent_key) or []) if h != hashed]
        self._set(recent_key, [hashed, *recent][: self.lifetimes.grounding_max_per_tool], ttl)

    async def grounding(
        self, tenant: str, tool: str, canonical_args: str, limit: int
    ) -> list[JSONObject]:
        exact = args_hash(canonical_args)
        recent: list[str] = self._get(self._keys.grounding_recent(tenant, tool)) or []
        ordered = [exact] + [h for h in recent if h != exact]
        found = [
            entry
            for h in ordered
            if (entry := _loads(self._get(self._keys.grounding(tenant, tool, h)))) is not None
        ]
        return found[:limit]

    async def record_trust(self, tenant: str, tool: str, cell: str) -> None:
        key = self._keys.trust(tenant)
        life = self.lifetimes
        table: dict[str, dict[str, int]] = self._get(key) or {}
        names = ["*"]
        if tool in table or len([t for t in table if t != "*"]) < life.trust_max_tools:
            names.insert(0, tool)
        for name in names:
            row = table.setdefault(name, {})
            row[cell] = row.get(cell, 0) + 1
            if sum(row.values()) > life.trust_window:
                table[name] = {c: n // 2 for c, n in row.items()}
        self._set(key, table, life.trust_s)

    async def trust_table(self, tenant: str) -> dict[str, dict[str, int]]:
        table: dict[str, dict[str, int]] = self._get(self._keys.trust(tenant)) or {}
        return {tool: dict(row) for tool, row in table.items()}
