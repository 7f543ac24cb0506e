"""Commit rules: what rehearsal's evidence allows to be committed, and which candidate wins.

Every trajectory's first action gets one piece of **evidence** (``evidence``):

- ``invalid`` — the schema check vetoed it (schema, unknown tool): always acted on;
- ``repeated_failure`` — the identical call already failed for real in this conversation and
  nothing since may have changed that (``rehearsal.hindsight``): a fact, always acted on;
- ``vetoed`` — imagination predicted a failure (veto, tool error, or a continuation that went
  badly) and every tool of the action is ``trusted`` (``rehearsal.trust``);
- ``doubted`` — the same prediction for a tool whose imagination is not trusted: recorded, not
  acted on;
- ``unrehearsed`` — nothing usable was imagined (trust switched the tool off, the imagined text
  was unparseable, or a deadline or engine error cut it short);
- ``clean`` — rehearsed and predicted to work; ``answer`` — a final answer (nothing to rehearse);
  ``read`` — a ``read_only`` call not imagined because reads are not (``imagine_reads`` off):
  its real result is its own evidence, and it ranks with ``clean``.

Only ``invalid``, ``repeated_failure`` and ``vetoed`` count against an action
(``DETERMINISTIC`` names the first two: decided without imagination). The guarantees follow:
an action with any of them is never committed while a candidate without them exists (one
exception, the planner's: a destructive anchor the samples outvoted gives way to a candidate that
is not destructive even when imagination doubts that one, ``decision.harmless``), a
schema-invalid action never while a valid one exists, and a repeated real failure never while
a schema-valid candidate that is no repeat exists.

``select`` — no extra engine call — ranks what is left by one sort key: evidence first (clean or
answer before unrehearsed or doubted), then the action sampled most often (the policy's own
vote), then a trajectory that reached a final answer, then the higher score, then the earlier
sample. ``anchored`` (the planner's default) keeps the un-rehearsed action unless it is
``invalid`` or ``vetoed`` and a ``clean`` replacement (or a ``read``) exists; ``replacement``
picks that one (a tool action: a final answer is no replacement for a call, since ending the
task early is worse than one failed call).
When nothing is allowed, ``least_bad`` still commits *something* — an imagined veto before a
repeated real failure (a prediction against a fact), and either before a schema-invalid action
— and the summary says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from .hindsight import REPEAT_CODE
from .trace import Trajectory
from .trust import Policy

Evidence = Literal[
    "invalid", "repeated_failure", "vetoed", "doubted", "unrehearsed", "clean", "answer", "read"
]
AGAINST: tuple[str, ...] = ("invalid", "repeated_failure", "vetoed")
DETERMINISTIC: tuple[str, ...] = ("invalid", "repeated_failure")
_RANK: dict[str, int] = {
    "clean": 0,
    "answer": 0,
    "read": 0,
    "unrehearsed": 1,
    "doubted": 1,
    "vetoed": 2,
    "repeated_failure": 3,
    "invalid": 4,
}


def evidence(trajectory: Trajectory, trust: Mapping[str, Policy]) -> Evidence:
    """What rehearsal found out about this trajectory's first action (module docstring)."""
    first = trajectory.steps[0]
    if first.turn.is_answer:
        return "answer"
    checked = [o.code for o in first.observations if o.source == "check"]
    if checked:
        return "repeated_failure" if checked == [REPEAT_CODE] else "invalid"
    kind = trajectory.outcome.split(":", 1)[0]
    if kind in ("veto", "error") or (kind == "ok" and trajectory.score < 0.5):
        tools = {call.name for call in first.turn.tool_calls}
        if all(trust.get(tool, "trusted") == "trusted" for tool in tools):
            return "vetoed"
        return "doubted"
    if kind in ("ok", "answer"):
        return "clean"
    if trajectory.ended == "read":
        return "read"
    return "unrehearsed"  # unparsed, open (cut short) or unrehearsed (trust off)


@dataclass(frozen=True, slots=True)
class Selection:
    """The chosen trajectory and a one-line reason for the trace."""

    trajectory: Trajectory
    why: str


def _preference(trajectory: Trajectory, found: Evidence) -> tuple[int, int, bool, float, int]:
    return (
        _RANK[found],
        -len(trajectory.samples),
        trajectory.outcome != "answer",
        -trajectory.score,
        trajectory.samples[0] if trajectory.samples else 1 << 30,
    )


def _ranked(
    trajectories: Sequence[Trajectory], trust: Mapping[str, Policy]
) -> list[tuple[Trajectory, Evidence]]:
    found = [(t, evidence(t, trust)) for t in trajectories]
    return sorted(found, key=lambda pair: _preference(*pair))


def select(trajectories: Sequence[Trajectory], trust: Mapping[str, Policy]) -> Selection | None:
    """The best trajectory with no evidence against it, or None when every one has some."""
    allowed = [(t, e) for t, e in _ranked(trajectories, trust) if e not in AGAINST]
    if not allowed:
        return None
    best, found = allowed[0]
    samples = sum(len(t.samples) for t in trajectories)
    why = (
        f"select: {len(best.samples)} of {samples} samples, evidence {found}, "
        f"{len(trajectories) - len(allowed)} trajectories ruled out"
    )
    return Selection(best, why)


def replacement(
    trajectories: Sequence[Trajectory], trust: Mapping[str, Policy], *, instead_of: str
) -> Selection | None:
    """A rehearsed-clean trajectory (or an unimagined read) to commit instead of the action
    ``instead_of``, if any."""
    clean = [
        t
        for t, e in _ranked(trajectories, trust)
        if e in ("clean", "read") and t.signature != instead_of
    ]
    if not clean:
        return None
    return Selection(clean[0], "replaced: the anchor had evidence against it; this rehearsed clean")


def least_bad(trajectories: Sequence[Trajectory], trust: Mapping[str, Policy]) -> Selection:
    """When every candidate has evidence against it: the lowest rank (module docstring)."""
    best, found = _ranked(trajectories, trust)[0]
    return Selection(best, f"least bad: every candidate has evidence against it (best: {found})")
