"""What the planner commits, and the rules it applies to a chosen commit before it goes out.

``Decision`` is the planner's verdict (``rehearsal/planner.py``): the turn, why, the commit path
and which candidate and trajectory it came from. ``anchored_choice`` is the anchored rule that
reaches one once the walks are done. The other functions read a decision against the
rehearsal's context, with no engine call of their own: a destructive anchor outvoted by its
samples, the evidence left against a commit, ``confirm``'s question in its place, a commit that
trust left unimagined, the refusal a repair call sees, and the headline reason of a degraded run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from .commit import AGAINST, DETERMINISTIC, Selection, evidence, least_bad, replacement
from .confirm import asked_before, question
from .context import RehearsalContext
from .memory import MemoryEntry
from .messages import AssistantTurn, Message
from .trace import RehearsalResult, Step, Timings, Trajectory

# The paths of a call committed unimagined on purpose: by trust, or by the learned budget's K = 0.
UNIMAGINED = frozenset({"trust_off", "auto_off"})


@dataclass(frozen=True, slots=True)
class Decision:
    """What to commit and why; indices refer to the result's candidates and trajectories."""

    turn: AssistantTurn
    why: str
    path: str
    chosen_index: int | None = None
    chosen_trajectory: int | None = None
    early_exit: str | None = None
    # The anchor, kept whatever its imagination said (its vetoes not acted on): the one commit
    # whose imagined failure is an unselected sample for trust (``rehearsal.trust``).
    unconditional: bool = False
    # Evidence against the committed call that no rule could act on, said in words (the
    # ``confirm`` question's reason); the evidence of its trajectory says the rest.
    against: str | None = None
    held: AssistantTurn | None = None  # under ``confirm``: the call held back for the user


def decided(selection: Selection, path: str, why: str | None = None) -> Decision:
    best = selection.trajectory
    index = best.samples[0] if best.samples else None
    return Decision(
        turn=best.first_turn, why=why or selection.why, path=path,
        chosen_index=index, chosen_trajectory=best.index,
    )  # fmt: skip


def unrehearsed_by_trust(ctx: RehearsalContext, decision: Decision) -> Decision:
    """Say so when the committed call went unimagined because trust, or the learned budget,
    switched its tools off.

    Whatever route chose it (``select``'s vote, a fallback, a schema-valid alternative to an
    invalid anchor), a call whose walk was skipped (a tool under trust's ``off``, or under
    ``ignore_vetoes`` outside the probe rate; a tool ``auto`` gave K = 0) was not rehearsed on
    purpose, so its path is ``trust_off`` or ``auto_off`` and the route stays in ``why``. Any
    other commit that went unimagined keeps its path and reads ``committed_rehearsed: false``.
    """
    if decision.path in UNIMAGINED or decision.turn.is_answer:
        return decision
    signature = decision.turn.signature
    if not any(w.ended == "skipped" and len(w.steps) == 1 and w.steps[0].turn.signature == signature
               for w in ctx.walks):  # fmt: skip
        return decision
    path = unimagined_path(ctx, decision.turn)
    who = "the learned budget" if path == "auto_off" else "trust"
    why = f"{decision.path}, not imagined: {who} switched imagination off; {decision.why}"
    return replace(decision, path=path, why=why)


def unimagined_path(ctx: RehearsalContext, turn: AssistantTurn) -> str:
    """``auto_off`` when the learned budget gave a tool of ``turn`` K = 0, else ``trust_off``."""
    return "auto_off" if ctx.learned_off(turn) else "trust_off"


def outvoted_by_samples(ctx: RehearsalContext, anchor: AssistantTurn) -> str | None:
    """Why a destructive call lacks the samples' backing, or None when it has it (or needs
    none): it is committed only when more than half of the sampled candidates are its action.

    Imagination alone cannot back it: a wrong cancellation is imagined succeeding as a right one
    is, so "rehearsed clean" says nothing about whether the call is the task's.
    """
    if ctx.risk_of(anchor) != "destructive" or ctx.budget.budget < 2:
        return None
    votes = sum(turn.signature == anchor.signature for turn in ctx.candidates)
    if 2 * votes > len(ctx.candidates):
        return None
    return f"only {votes} of {len(ctx.candidates)} samples chose this destructive call"


def backed(ctx: RehearsalContext, trajectories: list[Trajectory]) -> list[Trajectory]:
    """The trajectories a replacement may come from: a destructive action the samples did not
    back (``outvoted_by_samples``) is never the replacement of another candidate."""
    return [t for t in trajectories if outvoted_by_samples(ctx, t.first_turn) is None]


def harmless(ctx: RehearsalContext, trajectories: list[Trajectory]) -> list[Trajectory]:
    """Instead of an outvoted destructive anchor with no clean alternative: the other
    candidates that change nothing hard to undo and that no deterministic check refused (a
    read imagined failing costs one failed read; a wrong cancellation cannot be taken back)."""
    return [
        t
        for t in trajectories[1:]
        if ctx.risk_of(t.first_turn) != "destructive"
        and evidence(t, ctx.trust) not in DETERMINISTIC
    ]


def held_back(ctx: RehearsalContext, trajectory: Trajectory) -> bool:
    """A destructive action the rules would rather not commit: imagined failing (and acted on),
    or not backed by the samples. A repair is worth its call when every other candidate failed
    a deterministic check."""
    if ctx.risk_of(trajectory.first_turn) != "destructive":
        return False
    if evidence(trajectory, ctx.trust) == "vetoed":
        return True
    return outvoted_by_samples(ctx, trajectory.first_turn) is not None


def plurality(ctx: RehearsalContext, trajectories: list[Trajectory]) -> list[Trajectory]:
    """The alternatives sampled more often than the anchor (the first trajectory)."""
    votes = [sum(c.signature == t.signature for c in ctx.candidates) for t in trajectories]
    return [t for t, v in zip(trajectories[1:], votes[1:], strict=True) if v > votes[0]]


def against(ctx: RehearsalContext, decision: Decision) -> str | None:
    """The evidence against the committed call that no rule acted on, in words, if any."""
    if decision.against is not None:
        return decision.against
    if decision.chosen_trajectory is None:
        return None
    trajectory = ctx.walks[decision.chosen_trajectory].freeze()
    found = evidence(trajectory, ctx.trust)
    if found not in (*AGAINST, "doubted"):
        return None
    worst = trajectory.steps[0].worst  # there is one: evidence against means a bad first step
    said = ": ".join(part for part in (worst.code, worst.detail) if part) if worst else found
    if worst is not None and worst.source == "check":
        return f"a check refused it ({said})"
    unsure = (
        ", though this tool's imagined failures proved unreliable" if found == "doubted" else ""
    )
    return f"rehearsal imagined it failing ({said}){unsure}"


def confirmation(ctx: RehearsalContext, decision: Decision) -> Decision:
    """Under ``confirm``: a destructive call with evidence against it becomes a question.

    Only once per call and conversation (``rehearsal.confirm``): a call already held, and
    answered by the user since, is committed as the rules chose it.
    """
    turn = decision.turn
    if not ctx.budget.confirm or ctx.risk_of(turn) != "destructive":
        return decision
    reason = against(ctx, decision)
    if reason is None or asked_before(ctx.request.messages, turn):
        return decision
    why = f"confirm: held back ({reason}); {decision.why}"
    return Decision(question(turn, reason), why, "confirm", held=turn)


def refusal(step: Step) -> list[Message]:
    """The refused turn and, per call, the tool message a re-asking framework would send."""
    vetoes = {o.call: o for o in step.observations}
    skipped = json.dumps({"error": "not run: another call of this turn was refused"})
    messages = [step.turn.to_message()]
    for call in step.turn.tool_calls:
        veto = vetoes.get(call)
        content = veto.as_tool_content() if veto is not None else skipped
        messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
    return messages


def unseen(prior: list[MemoryEntry], trajectories: list[Trajectory]) -> list[MemoryEntry]:
    seen = {t.first_turn.actions for t in trajectories}
    return [entry for entry in prior if entry.actions not in seen]


def degraded(faults: list[str]) -> str | None:
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


def anchored_choice(ctx: RehearsalContext) -> Decision:
    """The anchored rule's commit: the anchor unless evidence says otherwise (docs/rehearsal.md)."""
    trajectories = [w.freeze() for w in ctx.walks]
    anchor = trajectories[0]
    found = evidence(anchor, ctx.trust)
    if found not in AGAINST:
        outvoted = outvoted_by_samples(ctx, anchor.first_turn)
        if outvoted is not None:
            return outvoted_choice(ctx, trajectories, outvoted)
        unimagined = anchor.outcome == "unrehearsed"
        path = unimagined_path(ctx, anchor.first_turn) if unimagined else "anchor"
        path = "read" if found == "read" else path
        why = f"anchor kept ({found})"
        return Decision(anchor.first_turn, why, path, 0, 0, unconditional=True)
    # A backed replacement first; a clean destructive one the samples did not back is still
    # better than an anchor with evidence against it, when it is all there is.
    better = replacement(
        backed(ctx, trajectories), ctx.trust, instead_of=anchor.signature
    ) or replacement(trajectories, ctx.trust, instead_of=anchor.signature)
    if better is not None:
        return decided(better, "replaced")
    if found in DETERMINISTIC:
        fallback = least_bad(trajectories, ctx.trust)
        if fallback.trajectory.index != 0:
            return decided(fallback, "valid_fallback")
    why = f"anchor kept although {found}: no rehearsed-clean alternative"
    return Decision(anchor.first_turn, why, "anchor_vetoed", 0, 0)


def outvoted_choice(
    ctx: RehearsalContext, trajectories: list[Trajectory], outvoted: str
) -> Decision:
    """A destructive anchor the samples did not back: the best clean alternative, if any."""
    anchor = trajectories[0]
    better = replacement(backed(ctx, trajectories), ctx.trust, instead_of=anchor.signature)
    if better is not None:
        return decided(better, "replaced", f"replaced: {outvoted}; {better.why}")
    others = harmless(ctx, trajectories)
    if others:
        fallback = least_bad(others, ctx.trust)
        return decided(fallback, "replaced", f"replaced: {outvoted}; {fallback.why}")
    more = replacement(plurality(ctx, trajectories), ctx.trust, instead_of=anchor.signature)
    if more is not None:
        why = f"replaced: {outvoted}; sampled more often, {more.why}"
        return decided(more, "replaced", why)
    why = f"anchor kept although {outvoted}: no rehearsed-clean alternative"
    return Decision(anchor.first_turn, why, "anchor_vetoed", 0, 0, against=outvoted)


def result_of(ctx: RehearsalContext, decision: Decision, total_ms: float) -> RehearsalResult:
    """The whole rehearsal as the server sees it: the committed turn and everything behind it."""
    phases = ctx.phases
    check = ctx.checker.check_turn(decision.turn)
    tools = {call.name for turn in ctx.candidates for call in turn.tool_calls}
    decision = unrehearsed_by_trust(ctx, decision)
    return RehearsalResult(
        turn=decision.turn,
        budget=ctx.budget,
        candidates=tuple(ctx.candidates),
        trajectories=tuple(w.freeze() for w in ctx.walks),
        chosen_trajectory=decision.chosen_trajectory,
        chosen_index=decision.chosen_index,
        why=decision.why,
        early_exit=decision.early_exit,
        commit_path=decision.path,
        commit_unconditional=decision.unconditional,
        commit_check="schema_invalid" if check.invalid else check.status,
        commit_check_detail=check.message,
        held=decision.held,
        probes=tuple(ctx.probes),
        trust={tool: ctx.policy(tool) for tool in sorted(tools)},
        risk=dict(ctx.request.risk),
        auto=ctx.learned,
        degraded=degraded(ctx.faults),
        faults=tuple(ctx.faults),
        memory_note=ctx.note,
        calls=dict(ctx.calls),
        tokens=dict(ctx.tokens),
        timings=Timings(phases["act"], phases["rehearse"], phases["commit"], total_ms),
    )
