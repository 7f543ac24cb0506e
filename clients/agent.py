"""The example agent: the loop a real agent runs against the gateway, on a scripted tool world.

It is the pattern to copy. Each turn the agent sends the conversation and the world's tools to
the gateway (with rehearsal knobs when asked), receives **one committed turn**, executes its tool
calls for real on the world, and sends the real results back as ``tool`` messages — which is how
the gateway learns its imagination's fidelity and the real call's latency. The episode ends on a
text answer or after ``max_turns``; the world's goal check says whether the task succeeded. A text
answer that holds a call for the user's confirmation (``confirm``) is put to the user when the
agent has a ``confirmer``; the user's reply is the next message, and the episode goes on.

Real tools take time; the worlds run in microseconds, so the agent waits ``tool_latency_s`` per
call (reads and writes differ) to stand in for a real backend. That wait is part of the
real-call latency the gateway measures.

Copy this shape for a real agent: keep the conversation, send it with ``tools=`` every turn,
append the committed assistant turn *as returned* (its ``tool_calls`` ids were minted by the
gateway), run each call, and answer each id with a ``tool`` message. The ids are how the gateway
matches a real result to what it imagined; rewriting them loses the fidelity measurement and the
grounding of later rehearsals.
"""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rehearsal_gateway.twin.worlds import Task, World, WorldTool

from . import vetoes
from .client import AsyncRehearsalClient, Rehearsal, summary


@dataclass(frozen=True, slots=True)
class ToolLatency:
    """Simulated latency of the real tools: reads are quicker than writes."""

    read_s: float = 0.12
    write_s: float = 0.35

    def of(self, tool: WorldTool | None) -> float:
        return self.write_s if tool is not None and tool.writes else self.read_s


@dataclass
class Episode:
    """What happened while the agent worked on one task."""

    task_id: str
    success: bool = False
    turns: int = 0
    real_calls: int = 0
    tool_errors: int = 0
    model_ms: float = 0.0
    rehearsal_ms: float = 0.0
    real_call_ms: float = 0.0
    total_ms: float = 0.0
    tokens: Counter[str] = field(default_factory=Counter)
    fidelities: list[float] = field(default_factory=list)
    rehearsal_ids: list[str] = field(default_factory=list)
    vetoes: int = 0
    degraded: Counter[str] = field(default_factory=Counter)
    # Calls the gateway held for the user's confirmation (``confirm``), and the user's answers.
    confirmations: list[tuple[tuple[str, ...], str]] = field(default_factory=list)
    # Every call run for real, in order: (tool, canonical "name arguments" signature, failed).
    calls: list[tuple[str, str, bool]] = field(default_factory=list)


def assistant_message(message: Any) -> dict[str, Any]:
    """The committed turn as it goes back into the conversation."""
    turn: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
    if message.tool_calls:
        turn["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
            for call in message.tool_calls
        ]
    return turn


def run_call(world: World, state: Any, call: Any) -> Any:
    """Execute one committed tool call on the world (an unknown tool or bad JSON is an error)."""
    name = call.function.name
    try:
        arguments = json.loads(call.function.arguments or "{}")
    except ValueError:
        arguments = None
    if name not in world.tools:
        return {"error": f"unknown tool {name!r}"}
    return world.call(state, name, arguments)


def _signature(call: Any) -> str:
    """``name + " " + canonical JSON arguments`` (docs/formats.md), the raw text if not JSON."""
    try:
        arguments = json.loads(call.function.arguments or "{}")
    except ValueError:
        return f"{call.function.name} {call.function.arguments}"
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return f"{call.function.name} {canonical}"


def _record(episode: Episode, completion: Any) -> None:
    """Fold one response's rehearsal summary and usage into the episode."""
    rehearsed = summary(completion)
    if rehearsed is None:
        usage = completion.usage
        if usage is not None:
            episode.tokens["act"] += usage.prompt_tokens + usage.completion_tokens
        return
    episode.rehearsal_ids.append(rehearsed.id)
    # The acting phase is what an unrehearsed call costs too; rehearsal is what comes on top.
    episode.rehearsal_ms += rehearsed.latency_ms.rehearse + rehearsed.latency_ms.commit
    episode.vetoes += sum(vetoes.from_summary(rehearsed).values())
    if rehearsed.degraded is not None:
        episode.degraded[rehearsed.degraded] += 1
    for role, counts in rehearsed.tokens.items():
        episode.tokens[role] += counts.get("prompt", 0) + counts.get("completion", 0)
    for item in (rehearsed.model_extra or {}).get("feedback") or []:
        if isinstance(item, dict) and isinstance(item.get("fidelity"), int | float):
            episode.fidelities.append(float(item["fidelity"]))


# The user behind the agent, asked to confirm calls the gateway held back (``confirm``): given the
# task and the held calls' signatures, the user's reply, or None to leave the question unanswered.
Confirmer = Callable[[Task, tuple[str, ...]], str | None]


def held_calls(completion: Any) -> tuple[str, ...]:
    """The signatures of the calls a response held for the user's confirmation (none: ``()``)."""
    rehearsed = summary(completion)
    held = rehearsed.held_for_confirmation if rehearsed is not None else None
    return tuple(
        f"{c.get('name')} {_canonical(c.get('arguments'))}"
        for c in held or ()
        if isinstance(c, dict)
    )


def _canonical(arguments: Any) -> str:
    try:
        value = json.loads(arguments or "{}") if isinstance(arguments, str) else arguments
    except ValueError:
        return str(arguments)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class ExampleAgent:
    """Runs world tasks through the gateway, executing every committed tool call for real."""

    def __init__(
        self,
        client: AsyncRehearsalClient,
        world: World,
        *,
        model: str,
        rehearsal: Rehearsal | None = None,
        latency: ToolLatency | None = None,
        max_turns: int = 12,
        seed: int = 0,
        max_tokens: int | None = None,
        confirmer: Confirmer | None = None,
    ) -> None:
        self.client = client
        self.world = world
        self.model = model
        self.rehearsal = rehearsal
        self.latency = latency or ToolLatency()
        self.max_turns = max_turns
        self.seed = seed
        self.max_tokens = max_tokens  # per turn; a small model may otherwise run to its context
        # A question in place of a held call goes to the user; without one it ends the episode.
        self.confirmer = confirmer

    async def run(self, task: Task, session_id: str) -> Episode:
        """Work on ``task`` until the model answers in text or the turns run out."""
        episode = Episode(task_id=task.id)
        state = self.world.new_state(task)
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": self.world.system_prompt},
            {"role": "user", "content": task.instruction},
        ]
        # One seed per task and turn: reruns repeat, tasks do not share samples, and the seeds
        # s..s+K-1 an engine gives the K choices of one turn do not overlap the next turn's.
        task_seed = self.seed * 10_000_000 + zlib.crc32(task.id.encode()) % 10_000 * 1000
        started = time.perf_counter()
        for turn in range(self.max_turns):
            asked = time.perf_counter()
            completion = await self.client.create(
                model=self.model,
                messages=messages,
                tools=self.world.tool_schemas(),
                seed=task_seed + turn * 64,
                rehearsal=self.rehearsal,
                extra_headers={"X-Session-Id": session_id},
                **({} if self.max_tokens is None else {"max_tokens": self.max_tokens}),
            )
            episode.model_ms += (time.perf_counter() - asked) * 1000
            episode.turns += 1
            _record(episode, completion)
            message = completion.choices[0].message
            messages.append(assistant_message(message))
            if not message.tool_calls:
                held = held_calls(completion)
                reply = self.confirmer(task, held) if held and self.confirmer else None
                if reply is None:
                    break
                episode.confirmations.append((held, reply))
                messages.append({"role": "user", "content": reply})
                continue
            for call in message.tool_calls:
                messages.append(await self._execute(episode, state, call))
        episode.total_ms = (time.perf_counter() - started) * 1000
        episode.success = self.world.check(task, state)
        return episode

    async def _execute(self, episode: Episode, state: Any, call: Any) -> dict[str, Any]:
        """Run one committed call on the world, as the real tool would, and time it."""
        began = time.perf_counter()
        await asyncio.sleep(self.latency.of(self.world.tools.get(call.function.name)))
        result = run_call(self.world, state, call)
        episode.real_call_ms += (time.perf_counter() - began) * 1000
        episode.real_calls += 1
        failed = isinstance(result, dict) and "error" in result
        if failed:
            episode.tool_errors += 1
        episode.calls.append((call.function.name, _signature(call), failed))
        return {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
