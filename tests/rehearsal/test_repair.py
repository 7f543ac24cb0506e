"""Repair: when every candidate fails a deterministic check, the model is re-asked once."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from rehearsal_gateway.rehearsal.budget import Budget
from rehearsal_gateway.rehearsal.errors import GeneratorError
from rehearsal_gateway.rehearsal.planner import Planner
from rehearsal_gateway.rehearsal.testing import (
    ScriptedGenerator,
    about,
    acting,
    answer_turn,
    imagined,
    multi_call_turn,
    tool_turn,
    veto,
)
from tests.rehearsal.conftest import CONVERSATION, make_request

GET = tool_turn("get_order", {"order_id": "#W1001"})
CANCEL = tool_turn("cancel_order", {"order_id": "#W1001", "reason": "no longer needed"})
INVALID = tool_turn("cancel_order", {"order_id": "#W1001", "reason": "whim"})  # not in the enum
FAILED = json.dumps({"error": "order #W1001 is already delivered"})
CANCEL_FAILED = (
    *CONVERSATION,
    CANCEL.to_message(),
    {"role": "tool", "tool_call_id": CANCEL.tool_calls[0].id, "content": FAILED},
)


async def run(engine: ScriptedGenerator, messages: Any = CONVERSATION, **knobs: Any):
    request = make_request(messages=messages, temperature=0.3, seed=5)
    return await Planner(engine).run(request, Budget(**knobs), rng=random.Random(1))


@pytest.mark.parametrize(
    ("mode", "commit", "acting_calls"),
    [
        pytest.param("parallel", "anchored", [acting(INVALID), acting(INVALID)], id="anchored"),
        pytest.param("sequential", "anchored", [acting(INVALID), acting(INVALID)], id="seq"),
        pytest.param("parallel", "select", [acting(INVALID, INVALID)], id="select"),
        pytest.param("parallel", "reflect", [acting(INVALID, INVALID)], id="reflect"),
    ],
)
async def test_every_candidate_invalid_is_repaired(
    mode: str, commit: str, acting_calls: list[Any]
) -> None:
    """The re-asked call sees its own call and the validator's message; its fix is committed."""
    engine = ScriptedGenerator().enqueue(*acting_calls, role="act")
    engine.enqueue(acting(CANCEL), role="commit")
    engine.enqueue(imagined({"status": "cancelled"}), match=about("cancel_order"))
    result = await run(engine, mode=mode, budget=2, commit=commit)
    assert (result.turn, result.commit_path, result.commit_check) == (CANCEL, "repaired", "ok")
    (repair,) = engine.by_role("commit")
    *conversation, refused, told = repair.messages
    assert tuple(conversation) == CONVERSATION
    assert refused == INVALID.to_message()
    assert told["tool_call_id"] == INVALID.tool_calls[0].id
    error = json.loads(told["content"])["error_tool_call"]
    assert error["code"] == "SCHEMA_INVALID"
    assert "whim" in error["message"]
    assert result.committed_rehearsed is True
    assert result.chosen_index == len(result.candidates) - 1
    assert engine.pending == 0


async def test_a_repeated_real_failure_is_repaired_with_the_real_error() -> None:
    """Every sample repeats a real failure: the re-asked model reads that error and moves on."""
    engine = ScriptedGenerator().enqueue(acting(CANCEL), acting(CANCEL), role="act")
    engine.enqueue(acting(GET), role="commit")
    engine.enqueue(imagined({"status": "delivered"}), match=about("get_order"))
    result = await run(engine, CANCEL_FAILED, budget=2)
    assert (result.turn, result.commit_path) == (GET, "repaired")
    told = engine.by_role("commit")[0].messages[-1]
    assert "already delivered" in json.loads(told["content"])["error_tool_call"]["message"]


async def test_a_repaired_final_answer_is_committed() -> None:
    """The model may answer instead (e.g. tell the user the cancel cannot be done)."""
    engine = ScriptedGenerator().enqueue(acting(CANCEL), acting(CANCEL), role="act")
    engine.enqueue(acting(answer_turn("It is already delivered.")), role="commit")
    result = await run(engine, CANCEL_FAILED, budget=2)
    assert (result.turn.content, result.commit_path) == ("It is already delivered.", "repaired")


@pytest.mark.parametrize(
    ("repair_call", "path", "turn", "degraded"),
    [
        pytest.param(acting(INVALID), "anchor_vetoed", INVALID, None, id="still-invalid"),
        pytest.param(
            GeneratorError("down"), "anchor_vetoed", INVALID, "engine_error", id="call-failed"
        ),
        pytest.param(acting(GET), "valid_fallback", GET, None, id="imagined-veto"),
    ],
)
async def test_a_repair_that_does_not_pass_falls_back(
    repair_call: Any, path: str, turn: Any, degraded: str | None
) -> None:
    """Still invalid, failed, or vetoed by imagination: the least-bad rule decides as before."""
    engine = ScriptedGenerator().enqueue(acting(INVALID), acting(INVALID), role="act")
    engine.enqueue(repair_call, role="commit")
    engine.enqueue(veto("INVALID_PARAMETERS"), match=about("get_order"))
    result = await run(engine, budget=2)
    assert (result.turn, result.commit_path) == (turn, path)
    assert len(engine.by_role("commit")) == 1
    assert result.degraded == degraded


@pytest.mark.parametrize(
    "knobs", [pytest.param({"repair": False}, id="off"), pytest.param({"budget": 1}, id="K=1")]
)
async def test_no_repair_when_off_or_without_budget(knobs: dict[str, Any]) -> None:
    """Knob off, or K = 1 (no unspent imagination to pay for it): no re-asking call."""
    engine = ScriptedGenerator().enqueue(acting(INVALID), acting(INVALID), role="act")
    result = await run(engine, **{"budget": 2, **knobs})
    assert (result.turn, result.commit_path) == (INVALID, "anchor_vetoed")
    assert engine.by_role("commit") == []


async def test_no_repair_while_any_candidate_passes_the_checks() -> None:
    """One valid candidate (even vetoed by imagination) means nothing to repair."""
    engine = ScriptedGenerator().enqueue(acting(INVALID), acting(GET), role="act")
    engine.enqueue(veto("INVALID_PARAMETERS"), match=about("get_order"))
    result = await run(engine, budget=2)
    assert (result.turn, result.commit_path) == (GET, "valid_fallback")
    assert engine.by_role("commit") == []


async def test_a_refused_multi_call_turn_answers_every_call() -> None:
    """Each call of the refused turn gets a tool message: the error, or that it was not run."""
    turn = multi_call_turn(("get_order", {"order_id": "#W1001"}), ("cancel_order", {"x": 1}))
    engine = ScriptedGenerator().enqueue(acting(turn), acting(turn), role="act")
    engine.enqueue(acting(CANCEL), role="commit")
    engine.enqueue(imagined({"status": "cancelled"}), match=about("cancel_order"))
    result = await run(engine, budget=2)
    assert result.commit_path == "repaired"
    first, second = engine.by_role("commit")[0].messages[-2:]
    assert [first["tool_call_id"], second["tool_call_id"]] == [c.id for c in turn.tool_calls]
    assert "not run" in first["content"]
    assert "SCHEMA_INVALID" in second["content"]


async def test_repair_counts_within_the_engine_call_bound() -> None:
    """A repaired rehearsal never spends more engine calls than the budget's bound."""
    engine = ScriptedGenerator().enqueue(acting(INVALID), acting(INVALID), role="act")
    engine.enqueue(acting(CANCEL), role="commit")
    engine.enqueue(imagined({"status": "cancelled"}), match=about("cancel_order"))
    result = await run(engine, budget=2)
    assert result.calls == {"act": 2, "commit": 1, "rehearse": 1}
    assert result.engine_calls <= result.budget.max_engine_calls()
