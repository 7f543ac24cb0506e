"""The ``select`` commit rule: choose one trajectory's first action without another engine call.

Candidates whose rehearsal went wrong (veto, tool error, unparsed, score under 0.5) are dropped
first. Among the rest the winner is, in order of preference:

1. the action sampled most often (the policy's own majority vote);
2. a trajectory that reached a final answer cleanly;
3. the higher score;
4. the earlier sample.

If every candidate was dropped, the same order is applied to all of them and the reason says so:
``select`` must commit *something*, and the client still gets a well-formed turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rehearsal.trace import Trajectory


@dataclass(frozen=True, slots=True)
class Selection:
    """The chosen trajectory and a one-line reason for the trace."""

    trajectory: Trajectory
    why: str


def _preference(trajectory: Trajectory) -> tuple[int, bool, float, int]:
    return (
        -len(trajectory.samples),
        trajectory.outcome != "answer",
        -trajectory.score,
        trajectory.samples[0],
    )


def select(trajectories: Sequence[Trajectory]) -> Selection:
    """Apply the rule above; ``trajectories`` must not be empty."""
    kept = [t for t in trajectories if not t.avoided]
    pool = kept or list(trajectories)
    best = min(pool, key=_preference)
    dropped = len(trajectories) - len(kept)
    if not kept:
        why = "select: every candidate rehearsed badly; least bad by frequency, answer, score"
    else:
        why = (
            f"select: {len(best.samples)} of {sum(len(t.samples) for t in trajectories)} samples, "
            f"outcome {best.outcome}, {dropped} trajectories dropped"
        )
    return Selection(best, why)
