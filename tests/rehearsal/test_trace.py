"""Trajectory outcomes and scores are pure functions of the steps, as documented in trace.py."""

from __future__ import annotations

import pytest

from rehearsal_gateway.rehearsal.budget import Budget
from rehearsal_gateway.rehearsal.commit import select
from rehearsal_gateway.rehearsal.messages import AssistantTurn
from rehearsal_gateway.rehearsal.parsing import Verdict
from rehearsal_gateway.rehearsal.testing import answer_turn, multi_call_turn, tool_turn
from rehearsal_gateway.rehearsal.trace import (
    Ending,
    ImaginedObservation,
    RehearsalResult,
    Step,
    Trajectory,
)


def step(turn: AssistantTurn, *verdicts: Verdict) -> Step:
    observations = tuple(
        ImaginedObservation(
            call, verdict, {"x": 1}, "INVALID_PARAMETERS" if verdict == "veto" else None
        )
        for call, verdict in zip(turn.tool_calls, verdicts, strict=False)
    )
    return Step(turn, observations)


TOOL = tool_turn("f", {})
PAIR = multi_call_turn(("f", {}), ("g", {}))


@pytest.mark.parametrize(
    ("steps", "ended", "outcome", "score"),
    [
        pytest.param([Step(answer_turn("hi"))], "answer", "answer", 1.0, id="answer-first"),
        pytest.param(
            [step(PAIR, "error", "veto")],
            "veto",
            "veto:INVALID_PARAMETERS",
            0.0,
            id="veto-outranks-error",
        ),
        pytest.param(
            [step(PAIR, "error", "unparsed")],
            "error",
            "error",
            0.0,
            id="error-outranks-unparsed",
        ),
        pytest.param(
            [step(TOOL, "unparsed")], "unparsed", "unparsed", 0.5, id="unparsed-is-no-evidence"
        ),
        pytest.param(
            [step(TOOL, "ok"), step(TOOL, "unparsed")], "unparsed", "ok", 1.0, id="late-unparsed"
        ),
        pytest.param([step(TOOL, "error")], "error", "error", 0.0, id="tool-error"),
        pytest.param([Step(TOOL)], "deadline", "open", 0.5, id="nothing-rehearsed"),
        pytest.param([step(TOOL, "ok")], "depth", "ok", 1.0, id="clean"),
        pytest.param(
            [step(TOOL, "ok"), Step(answer_turn("done"))],
            "answer",
            "answer",
            1.0,
            id="reached-answer",
        ),
        pytest.param([step(TOOL, "ok"), step(TOOL, "veto")], "veto", "ok", 0.5, id="late-veto"),
        pytest.param([step(TOOL, "ok"), Step(TOOL)], "engine_error", "open", 1.0, id="cut-short"),
    ],
)
def test_outcome_and_score(steps: list[Step], ended: Ending, outcome: str, score: float) -> None:
    """Each trajectory shape gets its documented outcome and score."""
    trajectory = Trajectory(0, (0,), tuple(steps), ended)
    assert (trajectory.outcome, trajectory.score) == (outcome, score)
    assert trajectory.to_dict()["outcome"] == outcome


def test_select_prefers_frequency_then_answers_then_score_then_order() -> None:
    """The select rule's tie-breaks, one at a time."""
    frequent = Trajectory(0, (0, 2), (step(TOOL, "ok"),), "depth")
    answered = Trajectory(1, (1,), (step(PAIR, "ok", "ok"), Step(answer_turn("x"))), "answer")
    assert select([answered, frequent], {}).trajectory is frequent
    plain = Trajectory(2, (0,), (step(TOOL, "ok"),), "depth")
    assert select([plain, answered], {}).trajectory is answered
    half = Trajectory(3, (0,), (step(TOOL, "ok"), step(TOOL, "veto")), "veto")
    assert select([half, plain], {}).trajectory is plain
    later = Trajectory(4, (5,), (step(TOOL, "ok"),), "depth")
    assert select([later, plain], {}).trajectory is plain


def test_full_trace_is_the_summary_then_its_details() -> None:
    """``to_dict`` is the summary's keys in order, then the details, with calls counted by role."""
    walked = Trajectory(0, (0,), (step(TOOL, "ok"),), "depth")
    calls = {"act": 1, "rehearse": 1}
    result = RehearsalResult(turn=TOOL, budget=Budget(), trajectories=(walked,), calls=calls)
    full = result.to_dict()
    summary = result.summary()
    assert full == {**summary, **result.details()}
    assert list(full)[: len(summary)] == list(summary)
    assert list(full)[len(summary) :] == [
        "budget_knobs", "turn", "why", "commit_unconditional", "commit_check_detail", "risk",
        "hindsight_probes",
        "early_exit_reason", "chosen_trajectory", "faults", "memory_note", "candidates", "trace",
    ]  # fmt: skip
    assert (summary["engine_calls"], full["engine_calls"]) == (2, {"act": 1, "rehearse": 1})
    assert (summary["committed_risk"], full["risk"]) == (["unknown"], {})
