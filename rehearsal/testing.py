"""Fakes for the two ports, shipped with the library (like ``httpx.MockTransport``).

``ScriptedGenerator`` answers engine calls from a script and records every request it saw::

    engine = ScriptedGenerator()
    engine.enqueue(acting(tool_turn("get_order", {"order_id": "#W1"})), role="act")
    engine.enqueue(imagined({"status": "pending"}), role="rehearse", match=about("get_order"))
    engine.enqueue(GeneratorError("engine down"), role="commit")       # scripted failure
    engine.enqueue(acting(answer_turn("done")), role="act", delay=0.05)  # scripted latency

A call takes the first queued item whose ``role`` and ``match`` accept its request, so concurrent
calls get the right answers whatever order they arrive in. When nothing matches, ``default``
(a function of the request) answers; without one the call fails with ``LookupError`` — an
unscripted call is a bug in the test, not an engine failure to be absorbed.

``InMemoryStore`` is a ``MemoryStore`` in a dict, with switchable failures per operation.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .messages import (
    JSON,
    AssistantTurn,
    GenerationRequest,
    GenerationResponse,
    Role,
    ToolCall,
    Usage,
    canonical_json,
)
from .prompts import GroundingObservation

Script = GenerationResponse | BaseException
Matcher = Callable[[GenerationRequest], bool]


def tool_turn(
    name: str, arguments: JSON, *, call_id: str | None = None, reasoning: str | None = None
) -> AssistantTurn:
    """An acting turn with one tool call."""
    call = ToolCall(call_id or f"call-{name}", name, json.dumps(arguments, ensure_ascii=False))
    return AssistantTurn(None, reasoning, (call,), "tool_calls")


def multi_call_turn(*calls: tuple[str, JSON]) -> AssistantTurn:
    """An acting turn with several tool calls, in order."""
    made = tuple(
        ToolCall(f"call-{i}-{name}", name, json.dumps(args, ensure_ascii=False))
        for i, (name, args) in enumerate(calls)
    )
    return AssistantTurn(None, None, made, "tool_calls")


def answer_turn(content: str, *, reasoning: str | None = None) -> AssistantTurn:
    """An acting turn that answers the user without calling a tool."""
    return AssistantTurn(content, reasoning, (), "stop")


def acting(*turns: AssistantTurn, usage: Usage | None = None) -> GenerationResponse:
    """An acting response with ``turns`` as its choices (10 prompt, 5 completion tokens each)."""
    return GenerationResponse(turns, usage or Usage(10, 5 * len(turns), 0))


def imagined(result: JSON, *, usage: Usage | None = None) -> GenerationResponse:
    """A rehearsal-role response in EnvACE's output format around ``result``."""
    text = f"<execution_result>\n{json.dumps(result)}\n</execution_result>"
    return raw_answer(text, usage=usage)


def veto(code: str, message: str = "rejected") -> GenerationResponse:
    """A rehearsal-role response vetoing the call with an EnvACE code."""
    return imagined({"error_tool_call": {"code": code, "message": message}})


def raw_answer(
    text: str, *, usage: Usage | None = None, finish_reason: str | None = None
) -> GenerationResponse:
    """A rehearsal-role response with exactly ``text`` as its content (``length``: cut short)."""
    turn = AssistantTurn(text, None, (), finish_reason)
    return GenerationResponse((turn,), usage or Usage(20, 8, 0))


def about(tool: str) -> Matcher:
    """Matches rehearsal-role requests that simulate ``tool``."""
    needle = f"Current tool to simulate:\n- name: {tool}\n"
    return lambda request: (
        request.role == "rehearse" and needle in str(request.messages[-1].get("content"))
    )


@dataclass(slots=True)
class _Scripted:
    item: Script
    role: Role | None
    match: Matcher | None
    delay: float


class ScriptedGenerator:
    """A ``Generator`` that answers from a script and records the requests it received."""

    def __init__(
        self, default: Callable[[GenerationRequest], GenerationResponse] | None = None
    ) -> None:
        self.default = default
        self.requests: list[GenerationRequest] = []
        self._queue: list[_Scripted] = []

    def enqueue(
        self,
        *items: Script,
        role: Role | None = None,
        match: Matcher | None = None,
        delay: float = 0.0,
    ) -> ScriptedGenerator:
        """Queue responses (or exceptions to raise), each optionally slowed by ``delay`` s."""
        self._queue += [_Scripted(item, role, match, delay) for item in items]
        return self

    @property
    def pending(self) -> int:
        """How many scripted items have not been used yet."""
        return len(self._queue)

    def by_role(self, role: Role) -> list[GenerationRequest]:
        return [r for r in self.requests if r.role == role]

    def _take(self, request: GenerationRequest) -> _Scripted:
        for position, scripted in enumerate(self._queue):
            if scripted.role not in (None, request.role):
                continue
            if scripted.match is None or scripted.match(request):
                return self._queue.pop(position)
        if self.default is None:
            raise LookupError(f"no scripted response for a {request.role} call")
        return _Scripted(self.default(request), None, None, 0.0)

    async def generate(self, request: GenerationRequest) -> GenerationResponse:
        self.requests.append(request)
        scripted = self._take(request)
        if scripted.delay:
            await asyncio.sleep(scripted.delay)
        if isinstance(scripted.item, BaseException):
            raise scripted.item
        return scripted.item


class InMemoryStore:
    """A ``MemoryStore`` in process memory; ``failing`` names operations that raise."""

    def __init__(self, *, max_entries: int = 32) -> None:
        self.max_entries = max_entries
        self.failing: set[str] = set()
        self.calls: list[str] = []  # operation names, in call order
        self.memory: dict[tuple[str, str], list[Any]] = {}
        self.observations: dict[tuple[str, str], list[tuple[str, Any]]] = {}

    def _check(self, op: str) -> None:
        self.calls.append(op)
        if op in self.failing:
            raise ConnectionError(f"store {op} is down")

    def add_grounding(self, tenant: str, observation: GroundingObservation) -> None:
        """Remember a real tool result, newest first, as the gateway does when a client sends it."""
        key = (tenant, observation.name)
        args = canonical_json(observation.arguments)
        kept = [item for item in self.observations.get(key, []) if item[0] != args]
        self.observations[key] = [(args, observation.to_dict()), *kept]

    async def recent_memory(self, tenant: str, session: str, limit: int) -> list[Any]:
        self._check("recent_memory")
        return list(self.memory.get((tenant, session), [])[:limit])

    async def append_memory(self, tenant: str, session: str, entries: list[Any]) -> None:
        self._check("append_memory")
        current = self.memory.get((tenant, session), [])
        self.memory[(tenant, session)] = [*reversed(entries), *current][: self.max_entries]

    async def grounding(self, tenant: str, tool: str, canonical_args: str, limit: int) -> list[Any]:
        self._check("grounding")
        items = self.observations.get((tenant, tool), [])
        exact = [obs for args, obs in items if args == canonical_args]
        others = [obs for args, obs in items if args != canonical_args]
        return (exact + others)[:limit]
