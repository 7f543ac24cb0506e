"""The planner: rehearse privately, then commit one assistant turn (DESIGN §5, §5b).

``Planner.run(request, budget, rng=...)`` is the whole public surface. By mode:

- **off** (or no tools): one plain acting call, nothing else.
- **parallel**: candidates are sampled with ``n``; every distinct tool action is walked
  concurrently (``RehearsalContext.walk``), then committed.
- **sequential**: attempt i acts with the memory note of attempts 1..i-1 in context and is walked
  before attempt i+1 starts.

Every candidate is first checked against the tool schemas (``checks``) and the conversation's
real failures (``hindsight``); a call either vetoes is never imagined. The commit rule is the
budget's ``commit``: **anchored** (the default: the plain acting call is kept unless evidence
counts against it, ``decision.anchored_choice``; alternatives are sampled only then), **select**
(``commit.select`` over the walks) or **reflect** (one more acting call with the memory note,
committed only when rehearsed clean). A destructive action needs a majority of the samples;
when every candidate failed a deterministic check, one **repair** call sees the check's message
(knob ``repair``); a repeat of a real failure is imagined once as a **hindsight probe** for trust,
never for the decision. Everything before the commit runs under one ``asyncio.timeout``
(``deadline_ms``) in ``asyncio.TaskGroup``s: on expiry or an engine fault the planner commits
from what it has and says ``degraded``, and a cancelled rehearsal leaves no task behind.

Why each rule is as it is, with every commit path and what each guarantees: docs/rehearsal.md.
Session memory holds only *real* outcomes (the server's feedback path writes them); imagined
vetoes are hints of one turn and are never stored.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import replace

from .budget import Budget
from .commit import (
    AGAINST,
    DETERMINISTIC,
    evidence,
    least_bad,
    select,
)
from .context import RehearsalContext, WalkState
from .decision import (
    Decision,
    anchored_choice,
    confirmation,
    decided,
    held_back,
    refusal,
    result_of,
    unseen,
)
from .errors import GeneratorError
from .hindsight import REPEAT_CODE
from .memory import MemoryEntry, entry_for, note_message, render_note
from .messages import ANSWER, AssistantTurn
from .ports import Generator, MemoryStore
from .request import PlannerSettings, RehearsalRequest
from .trace import RehearsalResult, Trajectory


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
            return result_of(ctx, Decision(turn, "rehearsal off", "off"), self._ms_since(started))
        decision = await self._rehearse(ctx)
        if decision is None:
            decision = await self._salvage(ctx)
        return result_of(ctx, confirmation(ctx, decision), self._ms_since(started))

    async def _rehearse(self, ctx: RehearsalContext) -> Decision | None:
        """The mode's work under the deadline, then the commit; None when it must be salvaged."""
        try:
            async with asyncio.timeout(ctx.budget.deadline_ms / 1000.0) as scope:
                ctx.prior = await self._recall(ctx)
                if ctx.budget.commit == "anchored":
                    return await self._anchored(ctx)
                mode = self._parallel if ctx.budget.mode == "parallel" else self._sequential
                early = await mode(ctx) or await self._repair(ctx)
        except TimeoutError:
            if not scope.expired():
                raise
            ctx.fault("deadline", f"after {ctx.budget.deadline_ms} ms")
            return None
        except GeneratorError as exc:
            ctx.fault("engine_error", f"act: {exc}")
            return None
        # Outside the deadline: the commit call is the answer the client is waiting for.
        return early if early is not None else await self._commit(ctx)

    # -- anchored ---------------------------------------------------------------------------

    async def _anchored(self, ctx: RehearsalContext) -> Decision:
        with ctx.phase("act"):
            anchor = await ctx.plain()
        ctx.candidates.append(anchor)
        walk = ctx.new_walk((0,), anchor)
        if walk.ended is None:
            with ctx.phase("rehearse"):
                await ctx.walk(walk, random.Random(ctx.seed()))
        fine = evidence(walk.freeze(), ctx.trust) not in AGAINST
        # ``early_exit`` decides spending, not the decision: off, the whole budget is spent. A
        # destructive anchor needs the samples' vote (``anchored_choice``), so they are drawn.
        stop = fine and ctx.budget.early_exit and ctx.risk_of(anchor) != "destructive"
        if ctx.budget.budget >= 2 and not stop:
            if ctx.budget.mode == "parallel":
                await self._alternatives(ctx, anchor)
            else:
                await self._attempts(ctx, first=1)
        repaired = await self._repair(ctx)
        await self._probe(ctx)
        if repaired is not None:
            return repaired
        decision = anchored_choice(ctx)
        if stop and ctx.budget.budget >= 2:
            return replace(decision, early_exit="anchor")
        return decision

    async def _alternatives(self, ctx: RehearsalContext, anchor: AssistantTurn) -> None:
        """Sample ``budget - 1`` alternatives to a vetoed anchor and walk each new action."""
        messages = list(ctx.request.messages)
        try:
            with ctx.phase("act"):
                turns = await ctx.act(messages, n=ctx.budget.budget - 1, seed=ctx.seed())
        except GeneratorError as exc:
            ctx.fault("engine_error", f"alternatives: {exc}")
            return
        groups: dict[str, list[int]] = {}
        for turn in turns:
            ctx.candidates.append(turn)
            if turn.signature != anchor.signature:
                groups.setdefault(turn.signature, []).append(len(ctx.candidates) - 1)
        walks = [ctx.new_walk(tuple(ix), ctx.candidates[ix[0]]) for ix in groups.values()]
        await self._walk_all(ctx, walks)

    # -- hindsight probe ---------------------------------------------------------------------

    async def _probe(self, ctx: RehearsalContext) -> None:
        """Imagine the anchor's repeats of a real failure once, for trust (docs/rehearsal.md).

        Only while the budget's engine-call bound has room (the vetoed anchor left its
        imagination unspent, unless a repair took it) and the tool's trust is still being
        earned (``learning``, ``ignore_vetoes``).
        """
        first = ctx.walks[0].steps[0]
        repeats = [o.call for o in first.observations if o.code == REPEAT_CODE]
        room = ctx.budget.max_engine_calls(len(first.turn.tool_calls)) - sum(ctx.calls.values())
        earning = all(ctx.policy(c.name) in ("learning", "ignore_vetoes") for c in repeats)
        if not repeats or len(repeats) > room or not earning:
            return
        history, rng = list(ctx.request.messages), random.Random(ctx.seed())
        try:
            with ctx.phase("rehearse"):
                for call in repeats:
                    seed = ctx.seed(rng)
                    ctx.probes.append(await ctx.imagine(history, first.turn, call, seed))
        except GeneratorError as exc:
            ctx.fault("engine_error", f"hindsight probe: {exc}")

    # -- repair -----------------------------------------------------------------------------

    async def _repair(self, ctx: RehearsalContext) -> Decision | None:
        """One re-asking call when every candidate failed a deterministic check (docstring).

        None when repair does not apply, the call fails, or its answer has evidence against it:
        the usual commit rules then decide among the walks (the repaired one included).
        """
        trust = ctx.trust
        trajectories = [w.freeze() for w in ctx.walks]
        if not (ctx.budget.repair and ctx.budget.budget >= 2 and trajectories):
            return None
        checked = [t for t in trajectories if evidence(t, trust) in DETERMINISTIC]
        if not checked or not all(t in checked or held_back(ctx, t) for t in trajectories):
            return None
        refused = least_bad(checked, trust).trajectory.steps[0]
        calls = len(refused.turn.tool_calls)
        if ctx.budget.max_engine_calls(calls) - sum(ctx.calls.values()) < 1 + calls:
            return None  # walks of destructive calls spent what the repair would take
        messages = [*ctx.request.messages, *refusal(refused)]
        try:
            with ctx.phase("commit"):
                turn = (await ctx.act(messages, n=1, seed=ctx.seed(), role="commit"))[0]
        except GeneratorError as exc:
            ctx.fault("engine_error", f"repair: {exc}")
            return None
        ctx.candidates.append(turn)
        walk = ctx.new_walk((len(ctx.candidates) - 1,), turn)
        if walk.ended is None:
            with ctx.phase("commit"):
                await ctx.walk(walk, random.Random(ctx.seed()), depth=1)
        repaired = walk.freeze()
        found = evidence(repaired, trust)
        if found in AGAINST:
            return None
        why = (
            "repaired: every candidate failed a deterministic check (or is a destructive call held "
            f"back); the re-asked call is {found}"
        )
        return Decision(turn, why, "repaired", repaired.samples[0], repaired.index)

    # -- select and reflect -----------------------------------------------------------------

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
            return Decision(
                turns[answers[0]], "final-answer majority", "early_exit", answers[0],
                early_exit="answer",
            )  # fmt: skip
        walks = [ctx.new_walk(tuple(ix), turns[ix[0]]) for ix in groups.values()]
        unanimous = len(turns) >= 2 and len(groups) == 1 and walks[0].ended != "veto"
        unanimous = unanimous and ctx.risk_of(turns[0]) != "destructive"  # always imagined
        if ctx.budget.early_exit and unanimous:
            return Decision(turns[0], "unanimous candidates", "early_exit", 0, 0, "unanimous")
        await self._walk_all(ctx, walks)
        return None

    async def _walk_all(self, ctx: RehearsalContext, walks: list[WalkState]) -> None:
        rngs = [random.Random(ctx.seed()) for _ in walks]
        with ctx.phase("rehearse"):
            walking = [walk for walk in walks if walk.ended is None]
            await ctx.prefetch_grounding(c for w in walking for c in w.steps[-1].turn.tool_calls)
            async with asyncio.TaskGroup() as group:
                for walk, rng in zip(walks, rngs, strict=True):
                    if walk.ended is None:
                        group.create_task(ctx.walk(walk, rng))

    async def _sequential(self, ctx: RehearsalContext) -> Decision | None:
        """An early decision on agreement, or None after the last attempt (commit due)."""
        return await self._attempts(ctx, first=0)

    async def _attempts(self, ctx: RehearsalContext, *, first: int) -> Decision | None:
        """Sequential attempts ``first``..budget-1, each with the memory of those before it.

        Anchored (``first`` = 1, after the anchor) stops at the first rehearsed-clean attempt;
        select/reflect stop early when an attempt is clean and repeats the previous one.
        """
        anchored = ctx.budget.commit == "anchored"
        for attempt in range(first, ctx.budget.budget):
            ctx.note = self._note(ctx, [w.freeze() for w in ctx.walks])
            messages = list(ctx.request.messages) + ([note_message(ctx.note)] if ctx.note else [])
            try:
                with ctx.phase("act"):
                    turn = (await ctx.act(messages, n=1, seed=ctx.seed()))[0]
            except GeneratorError as exc:
                if attempt == 0:
                    raise
                ctx.fault("engine_error", f"attempt {attempt + 1}: {exc}")
                break
            ctx.candidates.append(turn)
            if anchored and any(w.steps[0].turn.signature == turn.signature for w in ctx.walks):
                continue  # an action already rehearsed: its evidence is known
            walk = ctx.new_walk((len(ctx.candidates) - 1,), turn)
            if walk.ended is None:
                with ctx.phase("rehearse"):
                    await ctx.walk(walk, random.Random(ctx.seed()))
            done = walk.freeze()
            found = evidence(done, ctx.trust)
            if anchored and found in ("clean", "read") and ctx.budget.early_exit:
                return None
            clean = found in ("clean", "answer")
            agrees = attempt > 0 and done.signature == ctx.walks[-2].freeze().signature
            if not anchored and ctx.budget.early_exit and clean and agrees:
                return Decision(
                    turn, "attempt agreed with the previous one", "early_exit",
                    done.samples[0], done.index, "agreement",
                )  # fmt: skip
        return None

    def _note(self, ctx: RehearsalContext, trajectories: list[Trajectory]) -> str | None:
        """The memory note: walks whose evidence may steer (untrusted vetoes are left out)."""
        trust = ctx.trust
        entries = [entry_for(t) for t in trajectories if evidence(t, trust) != "doubted"]
        entries += unseen(ctx.prior, trajectories)
        return render_note(entries, ctx.settings.memory_tokens) if entries else None

    async def _commit(self, ctx: RehearsalContext) -> Decision:
        trajectories = [w.freeze() for w in ctx.walks]
        if ctx.budget.commit == "select":
            chosen = select(trajectories, ctx.trust)
            if chosen is not None:
                return decided(chosen, "selected")
        return await self._reflect(ctx, trajectories)

    async def _reflect(self, ctx: RehearsalContext, trajectories: list[Trajectory]) -> Decision:
        """One memory-guided commit call whose action is committed only once rehearsed clean."""
        ctx.note = self._note(ctx, trajectories) or render_note([], ctx.settings.memory_tokens)
        messages = [*ctx.request.messages, note_message(ctx.note)]
        try:
            with ctx.phase("commit"):
                turn = (await ctx.act(messages, n=1, seed=ctx.seed(), role="commit"))[0]
        except GeneratorError as exc:
            ctx.fault("engine_error", f"reflect: {exc}")
            return self._fallback(ctx, "reflect failed")
        ctx.candidates.append(turn)
        same = [t for t in trajectories if t.signature == turn.signature]
        if same:
            if evidence(same[0], ctx.trust) in AGAINST:
                return self._fallback(ctx, "reflect chose a ruled-out action")
            index = same[0].samples[0] if same[0].samples else None
            why = "reflect: committed a rehearsed action after reading the memory note"
            return Decision(turn, why, "reflected", index, same[0].index)
        walk = ctx.new_walk((len(ctx.candidates) - 1,), turn)
        if walk.ended is None:
            with ctx.phase("commit"):
                await ctx.walk(walk, random.Random(ctx.seed()), depth=1)
        verified = walk.freeze()
        if evidence(verified, ctx.trust) in ("clean", "answer"):
            why = "reflect: a new action, rehearsed clean before it was committed"
            return Decision(turn, why, "reflected", verified.samples[0], verified.index)
        return self._fallback(ctx, "reflect's new action did not rehearse clean")

    def _fallback(self, ctx: RehearsalContext, reason: str) -> Decision:
        """The best rehearsed candidate (or the least bad one) when reflect cannot be used."""
        trajectories = [w.freeze() for w in ctx.walks]
        chosen = select(trajectories, ctx.trust)
        if chosen is not None:
            return decided(chosen, "reflect_fallback", f"{reason}; {chosen.why}")
        worst = least_bad(trajectories, ctx.trust)
        return decided(worst, "least_bad", f"{reason}; {worst.why}")

    # -- faults and memory ------------------------------------------------------------------

    async def _salvage(self, ctx: RehearsalContext) -> Decision:
        """Commit from what is known after a deadline or a failed first call."""
        if ctx.walks:
            if ctx.budget.commit == "anchored":
                decision = anchored_choice(ctx)
            else:
                trajectories = [w.freeze() for w in ctx.walks]
                chosen = select(trajectories, ctx.trust) or least_bad(trajectories, ctx.trust)
                decision = decided(chosen, "salvaged")
            return replace(decision, why=f"degraded {decision.why}", path="salvaged")
        with ctx.phase("commit"):
            turn = await ctx.plain()
        return Decision(turn, "degraded: plain acting call, nothing rehearsed", "salvaged")

    async def _recall(self, ctx: RehearsalContext) -> list[MemoryEntry]:
        """Real failures remembered from earlier turns of this session; a store failure: none."""
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
        return [e for e in entries if e is not None and e.real and e.avoided]

    def _ms_since(self, started: float) -> float:
        return (self.clock() - started) * 1000.0
