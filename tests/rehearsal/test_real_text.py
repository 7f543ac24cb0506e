"""Imagined answers that miss the format, as real models write them: no evidence, never a block."""

from __future__ import annotations

import random
from typing import Any

import pytest

from rehearsal_gateway.rehearsal.budget import Budget
from rehearsal_gateway.rehearsal.memory import entry_for
from rehearsal_gateway.rehearsal.planner import Planner
from rehearsal_gateway.rehearsal.testing import (
    ScriptedGenerator,
    about,
    acting,
    imagined,
    raw_answer,
    tool_turn,
)
from tests.rehearsal.conftest import make_request

GET = tool_turn("get_order", {"order_id": "#W1001"})
CANCEL = tool_turn("cancel_order", {"order_id": "#W1001", "reason": "no longer needed"})

# One answer per way of missing, as the small real model wrote them (docs/real-model.md).
MISSES = [
    pytest.param("", None, "empty", id="empty"),
    pytest.param("<think>\nThe order exists, so\n</think>\n", None, "thinking_only", id="thinking"),
    pytest.param('<execution_result>\n{"order_id": "#W10', "length", "truncated", id="cut"),
    pytest.param('```json\n{"status": "pending"}\n```', None, "no_block", id="bare-json"),
    pytest.param('<execution_result>\n{"status": "ok"}', None, "unclosed", id="unclosed"),
    pytest.param(
        "<execution_result>\nThe order is pending.\n</execution_result>", None, "not_json",
        id="not-json",
    ),
    pytest.param("<execution_result>\n\"pending\"\n</execution_result>", None, "not_object",
                 id="string"),
    pytest.param(
        '<execution_result>\n{"order_id": "#W1001"}\n</execution_result>', None, "echo", id="echo"
    ),
    pytest.param(
        '<execution_result>{"a": 1}</execution_result>\n<execution_result>{"b": 2}'
        "</execution_result>", None, "multiple_blocks", id="two-blocks",
    ),
    pytest.param(
        'Simulated:\n<execution_result>\n{"status": "ok"}\n</execution_result>', None,
        "prose_around", id="prose",
    ),
    pytest.param("I'm sorry, but I can't run tools.", None, "refusal", id="refusal"),
]  # fmt: skip


async def run(engine: ScriptedGenerator, **knobs: Any):
    return await Planner(engine).run(make_request(), Budget(**knobs), rng=random.Random(3))


@pytest.mark.parametrize(("text", "finish", "parse"), MISSES)
async def test_a_miss_never_replaces_the_anchor(text: str, finish: str | None, parse: str) -> None:
    """anchored: an anchor whose imagination missed is no veto, so it is committed as sampled."""
    engine = ScriptedGenerator().enqueue(acting(GET), acting(CANCEL), role="act")
    engine.enqueue(raw_answer(text, finish_reason=finish), match=about("get_order"))
    engine.enqueue(imagined({"status": "cancelled"}), match=about("cancel_order"))
    result = await run(engine, budget=2)
    summary = result.summary()
    assert result.turn.signature == GET.signature
    assert (summary["vetoes"], summary["commit_check"]) == (0, "ok")
    assert summary["parse_classes"][parse] == 1
    anchor = result.trajectories[0]
    assert (anchor.outcome, anchor.score, anchor.ended) == ("unparsed", 0.5, "unparsed")
    assert not entry_for(anchor).avoided
    observation = anchor.steps[0].observations[0]
    assert (observation.parse, observation.raw) == (parse, text)
    assert observation.to_dict()["parse"] == parse


@pytest.mark.parametrize(("text", "finish", "parse"), MISSES)
async def test_a_miss_is_never_a_pass(text: str, finish: str | None, parse: str) -> None:
    """select: a candidate rehearsed clean is preferred to one whose imagination missed."""
    engine = ScriptedGenerator().enqueue(acting(GET, GET, CANCEL), role="act")
    engine.enqueue(raw_answer(text, finish_reason=finish), match=about("get_order"))
    engine.enqueue(imagined({"status": "cancelled"}), match=about("cancel_order"))
    result = await run(engine, mode="parallel", budget=3, commit="select")
    assert result.turn.signature == CANCEL.signature
    assert result.summary()["parse_classes"] == {parse: 1, "ok": 1}


async def test_a_missed_anchor_costs_no_alternatives() -> None:
    """A missed imagination of the anchor: it goes out as sampled, with no alternatives paid for."""
    engine = ScriptedGenerator().enqueue(acting(GET), acting(CANCEL), role="act")
    engine.enqueue(raw_answer("no idea"), match=about("get_order"))
    engine.enqueue(raw_answer("no idea either"), match=about("cancel_order"))
    result = await run(engine, budget=2)
    assert result.turn.signature == GET.signature
    assert result.summary()["parse_classes"] == {"no_block": 1}
    assert (result.commit_check, result.commit_path, result.engine_calls) == ("ok", "anchor", 2)
