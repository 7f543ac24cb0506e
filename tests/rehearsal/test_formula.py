"""The engine-call formula of docs/rehearsal.md, asserted per mode against the calls really made."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import pytest

from rehearsal_gateway.rehearsal.budget import Budget
from rehearsal_gateway.rehearsal.messages import (
    AssistantTurn,
    GenerationRequest,
    GenerationResponse,
    ToolCall,
)
from rehearsal_gateway.rehearsal.planner import Planner
from rehearsal_gateway.rehearsal.testing import ScriptedGenerator, imagined, veto
from rehearsal_gateway.rehearsal.trace import RehearsalResult
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

    Every acting or commit call adds one candidate, and every imagined call is in a trajectory:
    parallel:   1 + walks + reflect              (one n=K call; reflect is 0 or 1)
    sequential: (candidates - reflect) + walks + reflect
    anchored:   parallel 1 + (1 if alternatives were sampled) + walks; sequential candidates + walks
    walk(t) = c_1 + sum_{j=2..s} (1 + c_j), c_j = tool calls imagined at step j (0 for an answer)
    """
    budget = result.budget

    def walk(steps: Any) -> int:
        imagined = sum(len(s.observations) for s in steps)
        return imagined + len(steps) - 1

    walks = sum(walk(t.steps) for t in result.trajectories)
    candidates = len(result.candidates)
    if budget.commit == "anchored":
        return walks + (1 + (candidates > 1) if budget.mode == "parallel" else candidates)
    reflect = int(result.commit_path in ("reflected", "reflect_fallback", "least_bad"))
    if budget.mode == "parallel":
        return 1 + walks + reflect
    return candidates + walks


CASES = [
    pytest.param(mode, k, d, commit, c, id=f"{mode}-K{k}-d{d}-{commit}-c{c}")
    for mode in ("parallel", "sequential")
    for k in (1, 3)
    for d in (1, 2, 3)
    for commit in ("reflect", "select", "anchored")
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
    if commit == "anchored":  # the anchor rehearses clean: it is committed, nothing else runs
        closed, imagined = 1 + walk, c * d
    else:  # reflect's new action is verified one step deep
        reflect = 1 + c if commit == "reflect" else 0
        closed = (1 if mode == "parallel" else k) + k * walk + reflect
        imagined = k * c * d + (c if commit == "reflect" else 0)
    assert len(engine.requests) == result.engine_calls == formula(result) == closed
    assert closed <= budget.max_engine_calls(c)
    if commit == "reflect":
        assert closed == budget.max_engine_calls(c)
    assert result.calls.get("rehearse", 0) == imagined


def vetoing_world(calls_per_turn: int) -> ScriptedGenerator:
    """Every acting choice is a new action, and every imagined result is a veto."""
    counter = itertools.count()

    def turn() -> AssistantTurn:
        calls = []
        for _ in range(calls_per_turn):
            i = next(counter)
            calls.append(ToolCall(f"c{i}", "get_order", json.dumps({"order_id": f"#{i}"})))
        return AssistantTurn(None, None, tuple(calls), "tool_calls")

    def answer(request: GenerationRequest) -> GenerationResponse:
        if request.role == "rehearse":
            return veto("INVALID_PARAMETERS")
        return GenerationResponse(tuple(turn() for _ in range(request.n)))

    return ScriptedGenerator(default=answer)


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
@pytest.mark.parametrize("c", [1, 2])
@pytest.mark.parametrize("k", [1, 3])
async def test_anchored_worst_case_equals_the_bound(mode: str, c: int, k: int) -> None:
    """A vetoed anchor and vetoed alternatives cost exactly ``max_engine_calls`` at depth 1."""
    engine = vetoing_world(c)
    budget = Budget(mode=mode, budget=k, depth=1, commit="anchored")  # type: ignore[arg-type]
    result = await Planner(engine).run(make_request(), budget, rng=random.Random(0))
    assert len(engine.requests) == formula(result) == budget.max_engine_calls(c)
    assert result.commit_path == "anchor_vetoed"
    assert result.turn == result.candidates[0]


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
    budget = Budget(mode=mode, budget=4, depth=2, commit="reflect")  # type: ignore[arg-type]
    result = await Planner(engine).run(make_request(), budget, rng=random.Random(0))
    assert len(engine.requests) == formula(result) < budget.max_engine_calls()
    assert result.early_exit is not None
