"""The in-process store: the rehearsal store in one process's memory, bounded by keys and bytes.

The embedded default when no Redis URL is configured (``server/store/opening.py``): the same
behaviour as ``RedisStore``, TTLs honoured, for one process only. It holds at most ``max_keys``
keys and about ``max_bytes`` bytes; past either, the oldest writes go first. Without the byte
bound, 100,000 keys of multi-kilobyte traces are more than a gigabyte. A value's size is
estimated as it is stored (``stored_size``: the serialized bytes plus CPython's per-object
overhead), and ``tests/server/test_store.py`` measures with ``tracemalloc`` that the estimate
holds the real allocation within the bound.
"""

from __future__ import annotations

import sys
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from .backends import JSONObject, dump_value, load_value
from .keys import Keys, Lifetimes, args_hash

# What CPython spends around each held key beyond its payload: the key's str object, the entry's
# tuple, the float and int in it and the OrderedDict's slot and link (measured with tracemalloc:
# ~270 bytes for short keys on CPython 3.11).
ENTRY_OVERHEAD = 300


def stored_size(key: str, value: Any) -> int:
    """An estimate of the memory one held key costs, in bytes (never below the real size by much).

    ``sys.getsizeof`` of each container and leaf: a value is bytes (a JSON document), a list of
    bytes or str (memory, grounding's recent list) or the trust table's dict of small dicts.
    """
    return ENTRY_OVERHEAD + sys.getsizeof(key) + _deep_size(value)


def _compact(value: Any) -> Any:
    """Bytes copied to their own size: orjson's output keeps about twice its length allocated
    (tracemalloc: 8,163 B held for a 4,147 B document), slack that ``sys.getsizeof`` does not see
    and that doubled what the store really held."""
    if isinstance(value, bytes):
        return bytes(memoryview(value))
    if isinstance(value, list):
        return [bytes(memoryview(item)) if isinstance(item, bytes) else item for item in value]
    return value


def _deep_size(value: Any) -> int:
    if isinstance(value, list):
        return sys.getsizeof(value) + sum(_deep_size(item) for item in value)
    if isinstance(value, dict):
        return sys.getsizeof(value) + sum(_deep_size(k) + _deep_size(v) for k, v in value.items())
    return sys.getsizeof(value)


class InProcessStore:
    """The embedded default: the same behaviour in one process's memory, with TTLs honoured."""

    kind = "in-process"

    def __init__(
        self,
        *,
        lifetimes: Lifetimes | None = None,
        max_keys: int = 100_000,
        max_bytes: int = 256 * 1024 * 1024,
    ) -> None:
        self.lifetimes = lifetimes or Lifetimes()
        self._keys = Keys()
        self._max_keys = max_keys
        self._max_bytes = max_bytes
        self._data: OrderedDict[str, tuple[float, Any, int]] = OrderedDict()
        self.bytes = 0  # the estimated size of everything held (``stored_size``)

    def __len__(self) -> int:
        return len(self._data)

    def _get(self, key: str) -> Any:
        item = self._data.get(key)
        if item is None:
            return None
        expires_at, value, _size = item
        if expires_at <= time.monotonic():
            self._drop(key)
            return None
        return value

    def _drop(self, key: str) -> None:
        item = self._data.pop(key, None)
        if item is not None:
            self.bytes -= item[2]

    def _set(self, key: str, value: Any, ttl_s: int) -> None:
        self._drop(key)
        value = _compact(value)
        size = stored_size(key, value)
        self._data[key] = (time.monotonic() + ttl_s, value, size)
        self.bytes += size
        # Bounded memory: the oldest writes go first, until both bounds hold (the newest stays).
        while len(self._data) > 1 and (
            len(self._data) > self._max_keys or self.bytes > self._max_bytes
        ):
            _key, (_expires, _value, dropped) = self._data.popitem(last=False)
            self.bytes -= dropped

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        self._data.clear()
        self.bytes = 0

    async def save_trace(self, tenant: str, rehearsal_id: str, trace: JSONObject) -> None:
        self._set(self._keys.trace(tenant, rehearsal_id), dump_value(trace), self.lifetimes.trace_s)

    async def save_settled(
        self, tenant: str, rehearsal_id: str, trace: JSONObject, pending: Mapping[str, JSONObject]
    ) -> None:
        for tool_call_id, record in pending.items():
            await self.save_pending(tenant, tool_call_id, record)
        await self.save_trace(tenant, rehearsal_id, trace)

    async def load_trace(self, tenant: str, rehearsal_id: str) -> JSONObject | None:
        return load_value(self._get(self._keys.trace(tenant, rehearsal_id)))

    async def save_pending(self, tenant: str, tool_call_id: str, record: JSONObject) -> None:
        self._set(
            self._keys.pending(tenant, tool_call_id), dump_value(record), self.lifetimes.pending_s
        )

    async def take_pending(self, tenant: str, tool_call_id: str) -> JSONObject | None:
        key = self._keys.pending(tenant, tool_call_id)
        value = self._get(key)
        self._drop(key)
        return load_value(value)

    async def append_memory(self, tenant: str, session: str, entries: list[JSONObject]) -> None:
        if not entries:
            return
        key = self._keys.memory(tenant, session)
        current: list[bytes] = self._get(key) or []
        fresh = [dump_value(entry) for entry in reversed(entries)] + current
        self._set(key, fresh[: self.lifetimes.memory_max_entries], self.lifetimes.memory_s)

    async def recent_memory(self, tenant: str, session: str, limit: int) -> list[JSONObject]:
        raws: list[bytes] = self._get(self._keys.memory(tenant, session)) or []
        return [entry for raw in raws[:limit] if (entry := load_value(raw)) is not None]

    async def save_grounding(
        self, tenant: str, tool: str, canonical_args: str, observation: JSONObject
    ) -> None:
        hashed = args_hash(canonical_args)
        ttl = self.lifetimes.grounding_s
        self._set(self._keys.grounding(tenant, tool, hashed), dump_value(observation), ttl)
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
            if (entry := load_value(self._get(self._keys.grounding(tenant, tool, h)))) is not None
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

    async def record_budget(
        self, tenant: str, tools: tuple[str, ...], cells: tuple[str, ...]
    ) -> None:
        key = self._keys.budget(tenant)
        life = self.lifetimes
        table: dict[str, dict[str, int]] = self._get(key) or {}
        names = []
        for tool in tools:
            if tool in table or len([t for t in table if t != "*"]) < life.trust_max_tools:
                names.append(tool)
                table.setdefault(tool, {})
        for name in [*names, "*"]:
            row = table.setdefault(name, {})
            for cell in cells:
                row[cell] = row.get(cell, 0) + 1
            if row.get("n", 0) + row.get("r", 0) > life.trust_window:
                table[name] = {c: n // 2 for c, n in row.items()}
        self._set(key, table, life.trust_s)

    async def budget_table(self, tenant: str) -> dict[str, dict[str, int]]:
        table: dict[str, dict[str, int]] = self._get(self._keys.budget(tenant)) or {}
        return {tool: dict(row) for tool, row in table.items()}
