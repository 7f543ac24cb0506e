"""The engine-call formula of docs/rehearsal.md, asserted per mode against the calls really made."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import pytest

from rehearsal.budget import Budget
from rehearsal.messages import AssistantTurn, GenerationRequest, GenerationResponse, ToolCall
from rehearsal.planner import Planner
from rehearsal.testing import ScriptedGenerator, imagined
from rehearsal.trace import RehearsalResult
from tests.rehearsal.conftest import make_request


def distinct_world(calls_per_turn: int) -> ScriptedGenerator:
    """Every acting choice is a new action of ``calls_per_turn`` calls; every rehearsal is ok."""
    counter = itertools.count()

    def turn() -> AssistantTurn:
        calls = []
        for _ in range(calls_per_turn):
            i = next(counter)
            calls.append(ToolCall(f"c{i}", "get_order", json.dumps({"order_id": f"#{i}"})))
        return AssistantTurn(None, None, tuple(calls), "tool_calls")

    def answer(request: GenerationRequest) -> GenerationResponse:
        if request.role == "rehearse":
            return imagined({"status": "pending"})
        return GenerationResponse(tuple(turn() for _ in range(request.n)))

    return ScriptedGenerator(default=answer)


def formula(result: RehearsalResult) -> int:
    """The documented count, computed from the trace's shape.

    parallel:   1 + sum over walked trajectories of walk(t) + reflect
    sequential: sum over attempts of (1 + walk(t)) + reflect
    walk(t) = c_1 + sum_{j=2..s} (1 + c_j), c_j = tool calls imagined at step j (0 for an answer)
    """
    budget = result.budget
    reflect = int(budget.commit == "reflect" and result.early_exit is None)

    def walk(steps: Any) -> int:
        return sum(len(s.turn.tool_calls) + (j > 0) for j, s in enumerate(steps))

    walks = sum(walk(t.steps) for t in result.trajectories)
    if budget.mode == "parallel":
        return 1 + walks + reflect
    return len(result.trajectories) + walks + reflect


CASES = [
    pytest.param(mode, k, d, commit, c, id=f"{mode}-K{k}-d{d}-{commit}-c{c}")
    for mode in ("parallel", "sequential")
    for k in (1, 3)
    for d in (1, 2, 3)
    for commit in ("reflect", "select")
    for c in (1, 2)
]


@pytest.mark.parametrize(("mode", "k", "d", "commit", "c"), CASES)
async def test_engine_calls_equal_the_formula(
    mode: str, k: int, d: int, commit: str, c: int
) -> None:
    """Without early exits the count is the closed form; it always equals the trace formula."""
    engine = distinct_world(c)
    budget = Budget(mode=mode, budget=k, depth=d, commit=commit)  # type: ignore[arg-type]
    result = await Planner(engine).run(make_request(), budget, rng=random.Random(0))
    walk = c + (d - 1) * (1 + c)
    reflect = int(commit == "reflect")
    closed = 1 + k * walk + reflect if mode == "parallel" else k * (1 + walk) + reflect
    assert len(engine.requests) == result.engine_calls == formula(result) == closed
    assert closed == budget.max_engine_calls(c)
    assert result.calls.get("rehearse", 0) == k * c * d


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
async def test_early_exits_only_lower_the_count(mode: str) -> None:
    """With agreeing candidates the count drops below the bound and still equals the formula."""
    same = ToolCall("c", "get_order", '{"order_id": "#1"}')
    turn = AssistantTurn(None, None, (same,), "tool_calls")

    def answer(request: GenerationRequest) -> GenerationResponse:
        if request.role == "rehearse":
            return imagined({"status": "pending"})
        return GenerationResponse((turn,) * request.n)

    engine = ScriptedGenerator(default=answer)
    budget = Budget(mode=mode, budget=4, depth=2)  # type: ignore[arg-type]
    result = await Planner(engine).run(make_request(), budget, rng=random.Random(0))
    assert len(engine.requests) == formula(result) < budget.max_engine_calls()
    assert result.early_exit is not None
