"""The planner: rehearse privately, then commit one assistant turn (DESIGN §5).

``Planner.run(request, budget, rng=...)`` is the whole public surface. By mode:

- **off** (or no tools): one plain acting call, nothing else.
- **parallel**: one acting call with ``n = budget``; candidates are grouped by signature. A
  final-answer majority commits the first answer; with ``early_exit`` and at least two samples,
  unanimous candidates commit at once. Otherwise every distinct tool action is walked
  concurrently (``RehearsalContext.walk``), then committed.
- **sequential**: attempt i acts with the memory note of attempts 1..i-1 in context and is walked
  before attempt i+1 starts; with ``early_exit``, an attempt that rehearses clean and repeats the
  previous attempt's action is committed at once.
- **commit**: ``reflect`` makes one more acting call (role ``commit``, low temperature) with the
  memory note as the conversation's last message; ``select`` applies ``commit.select``.

Everything up to the commit runs under one ``asyncio.timeout`` of ``deadline_ms``. When it
expires, or the first acting call fails, the planner commits from what it has (``select`` over
the walks so far) or, with no candidate at all, makes a plain acting call; the result says
``degraded`` and why. Branches run in ``asyncio.TaskGroup``s, so a cancelled rehearsal — deadline
or client gone — leaves no task behind. Engine-call counts per mode are in docs/rehearsal.md.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from rehearsal.budget import Budget
from rehearsal.commit import select
from rehearsal.context import PlannerSettings, RehearsalContext, RehearsalRequest
from rehearsal.errors import GeneratorError
from rehearsal.memory import MemoryEntry, entry_for, note_message, render_note
from rehearsal.messages import ANSWER, AssistantTurn
from rehearsal.ports import Generator, MemoryStore
from rehearsal.trace import RehearsalResult, Timings, Trajectory


@dataclass(frozen=True, slots=True)
class Decision:
    """What to commit and why; indices refer to the result's candidates and trajectories."""

    turn: AssistantTurn
    why: str
    chosen_index: int | None = None
    chosen_trajectory: int | None = None
    early_exit: str | None = None


class Planner:
    """Runs rehearsals against one generator and (optionally) one memory store."""

    def __init__(
        self,
        generator: Generator,
        store: MemoryStore | None = None,
        settings: PlannerSettings | None = None,
        *,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.generator = generator
        self.store = store
        self.settings = settings or PlannerSettings()
        self.clock = clock

    async def run(
        self, request: RehearsalRequest, budget: Budget, *, rng: random.Random
    ) -> RehearsalResult:
        """Rehearse ``request`` within ``budget``; raises GeneratorError only if no call works."""
        ctx = RehearsalContext(
            request, budget, generator=self.generator, store=self.store,
            settings=self.settings, rng=rng, clock=self.clock,
        )  # fmt: skip
        started = self.clock()
        if not budget.active or not request.tools:
            with ctx.phase("act"):
                turn = await ctx.plain()
            return self._result(ctx, Decision(turn, "rehearsal off"), None, started)
        decision = await self._rehearse(ctx)
        if decision is None:
            decision = await self._salvage(ctx)
        await self._remember(ctx)
        return self._result(ctx, decision, ctx.note, started)

    async def _rehearse(self, ctx: RehearsalContext) -> Decision | None:
        """The mode's work under the deadline, then the commit; None when it must be salvaged."""
        try:
            async with asyncio.timeout(ctx.budget.deadline_ms / 1000.0) as scope:
                ctx.prior = await self._recall(ctx)
                mode = self._parallel if ctx.budget.mode == "parallel" else self._sequential
                early = await mode(ctx)
        except TimeoutError:
            if not scope.expired():
                raise
            ctx.fault("deadline", f"after {ctx.budget.deadline_ms} ms")
            return None
        except GeneratorError as exc:
            ctx.fault("engine_error", f"act: {exc}")
            return None
        # Outside the deadline: the commit may already be streaming to the client.
        return early if early is not None else await self._commit(ctx)

    async def _parallel(self, ctx: RehearsalContext) -> Decision | None:
        """An early decision, or None once every distinct action was walked (commit due)."""
        with ctx.phase("act"):
            turns = await ctx.act(list(ctx.request.messages), n=ctx.budget.budget, seed=ctx.seed())
        ctx.candidates.extend(turns)
        groups: dict[str, list[int]] = {}
        for index, turn in enumerate(turns):
            groups.setdefault(turn.signature, []).append(index)
        answers = groups.get(ANSWER, [])
        if 2 * len(answers) > len(turns):
            return Decision(turns[answers[0]], "final-answer majority", answers[0], None, "answer")
        if ctx.budget.early_exit and len(turns) >= 2 and len(groups) == 1:
            return Decision(turns[0], "unanimous candidates", 0, None, "unanimous")
        walks = [ctx.new_walk(tuple(ix), turns[ix[0]]) for ix in groups.values()]
        rngs = [random.Random(ctx.seed()) for _ in walks]
        with ctx.phase("rehearse"):
            async with asyncio.TaskGroup() as group:
                for walk, rng in zip(walks, rngs, strict=True):
                    if walk.ended is None:
                        group.create_task(ctx.walk(walk, rng))
        return None

    async def _sequential(self, ctx: RehearsalContext) -> Decision | None:
        """An early decision on agreement, or None after the last attempt (commit due)."""
        conversation = list(ctx.request.messages)
        for attempt in range(ctx.budget.budget):
            entries = [entry_for(w.freeze()) for w in ctx.walks] + ctx.prior
            ctx.note = render_note(entries, ctx.settings.memory_tokens) if entries else None
            messages = conversation + ([note_message(ctx.note)] if ctx.note else [])
            try:
                with ctx.phase("act"):
                    turn = (await ctx.act(messages, n=1, seed=ctx.seed()))[0]
            except GeneratorError as exc:
                if attempt == 0:
                    raise
                ctx.fault("engine_error", f"attempt {attempt + 1}: {exc}")
                break
            ctx.candidates.append(turn)
            walk = ctx.new_walk((attempt,), turn)
            if walk.ended is None:
                with ctx.phase("rehearse"):
                    await ctx.walk(walk, random.Random(ctx.seed()))
            done = walk.freeze()
            if ctx.budget.early_exit and attempt > 0 and _agrees(done, ctx.walks[-2].freeze()):
                return Decision(turn, "attempt agreed with the previous one", attempt,
                                done.index, "agreement")  # fmt: skip
        return None

    async def _commit(self, ctx: RehearsalContext) -> Decision:
        trajectories = [w.freeze() for w in ctx.walks]
        # ``select`` never commits an action rehearsal advised against: when every candidate
        # went badly it falls back to one memory-guided acting call, as ``reflect`` would.
        every_bad = all(t.avoided for t in trajectories)
        if ctx.budget.commit == "reflect" or every_bad:
            entries = [entry_for(t) for t in trajectories] + _unseen(ctx.prior, trajectories)
            ctx.note = render_note(entries, ctx.settings.memory_tokens)
            messages = [*ctx.request.messages, note_message(ctx.note)]
            try:
                with ctx.phase("commit"):
                    turns = await ctx.act(messages, n=1, seed=ctx.seed(), role="commit")
            except GeneratorError as exc:
                ctx.fault("engine_error", f"reflect: {exc}")
            else:
                decision = _reflected(turns[0], trajectories)
                if ctx.budget.commit == "select":
                    why = "select: every candidate rehearsed badly; committed after reflecting"
                    return replace(decision, why=why)
                return decision
        return _selected(trajectories)

    async def _salvage(self, ctx: RehearsalContext) -> Decision:
        """Commit from what is known after a deadline or a failed first call."""
        if ctx.walks:
            decision = _selected([w.freeze() for w in ctx.walks])
            return Decision(decision.turn, f"degraded {decision.why}", decision.chosen_index,
                            decision.chosen_trajectory)  # fmt: skip
        with ctx.phase("commit"):
            turn = await ctx.plain()
        return Decision(turn, "degraded: plain acting call, nothing rehearsed")

    async def _recall(self, ctx: RehearsalContext) -> list[MemoryEntry]:
        """Earlier rehearsals' avoided actions in this session; a store failure means none."""
        tenant, session = ctx.request.tenant, ctx.request.session
        limit = ctx.settings.session_memory_limit
        if ctx.store is None or tenant is None or session is None or limit <= 0:
            return []
        try:
            raw = await ctx.store.recent_memory(tenant, session, limit)
        except Exception as exc:  # any backend failure: rehearse without session memory
            ctx.fault("store_error", f"recent_memory ({type(exc).__name__})")
            return []
        entries = [MemoryEntry.from_dict(item) for item in raw]
        return [e for e in entries if e is not None and e.avoided]

    async def _remember(self, ctx: RehearsalContext) -> None:
        tenant, session = ctx.request.tenant, ctx.request.session
        if ctx.store is None or tenant is None or session is None or not ctx.walks:
            return
        entries = [entry_for(w.freeze()).to_dict() for w in ctx.walks]
        try:
            await ctx.store.append_memory(tenant, session, entries)
        except Exception as exc:  # the answer is ready; losing the memory only costs hindsight
            ctx.fault("store_error", f"append_memory ({type(exc).__name__})")

    def _result(
        self, ctx: RehearsalContext, decision: Decision, memory: str | None, started: float
    ) -> RehearsalResult:
        phases = ctx.phases
        total = (self.clock() - started) * 1000.0
        return RehearsalResult(
            turn=decision.turn,
            budget=ctx.budget,
            candidates=tuple(ctx.candidates),
            trajectories=tuple(w.freeze() for w in ctx.walks),
            chosen_trajectory=decision.chosen_trajectory,
            chosen_index=decision.chosen_index,
            why=decision.why,
            early_exit=decision.early_exit,
            degraded=_degraded(ctx.faults),
            faults=tuple(ctx.faults),
            memory_note=memory,
            calls=dict(ctx.calls),
            tokens=dict(ctx.tokens),
            timings=Timings(phases["act"], phases["rehearse"], phases["commit"], total),
        )


def _agrees(current: Trajectory, previous: Trajectory) -> bool:
    clean = not current.avoided and current.outcome != "open"
    return clean and current.signature == previous.signature


def _unseen(prior: list[MemoryEntry], trajectories: list[Trajectory]) -> list[MemoryEntry]:
    seen = {t.first_turn.actions for t in trajectories}
    return [entry for entry in prior if entry.actions not in seen]


def _reflected(turn: AssistantTurn, trajectories: list[Trajectory]) -> Decision:
    same = [t for t in trajectories if t.signature == turn.signature]
    index = same[0].samples[0] if same else None
    chosen = same[0].index if same else None
    return Decision(turn, "reflect: committed after reading the memory note", index, chosen)


def _selected(trajectories: list[Trajectory]) -> Decision:
    chosen = select(trajectories)
    best = chosen.trajectory
    return Decision(best.first_turn, chosen.why, best.samples[0], best.index)


def _degraded(faults: list[str]) -> str | None:
    """The headline reason: a deadline outranks an engine error, which outranks the store."""
    kinds = {fault.split(":", 1)[0] for fault in faults}
    for kind, reason in (
        ("deadline", "deadline"),
        ("engine_error", "engine_error"),
        ("store_error", "store_unavailable"),
    ):
        if kind in kinds:
            return reason
    return None
