"""The anchored commit and the trust it acts on: rehearsal changes a decision only on evidence."""

from __future__ import annotations

import random
from typing import Any

import pytest

from rehearsal_gateway.rehearsal.budget import Budget
from rehearsal_gateway.rehearsal.errors import GeneratorError
from rehearsal_gateway.rehearsal.planner import Planner
from rehearsal_gateway.rehearsal.request import PlannerSettings
from rehearsal_gateway.rehearsal.testing import (
    ScriptedGenerator,
    about,
    acting,
    answer_turn,
    imagined,
    tool_turn,
    veto,
)
from tests.rehearsal.conftest import make_request

GET = tool_turn("get_order", {"order_id": "#W1001"})
OTHER = tool_turn("get_order", {"order_id": "#W1002"})
CANCEL = tool_turn("cancel_order", {"order_id": "#W1001", "reason": "no longer needed"})
INVALID = tool_turn("cancel_order", {"order_id": "#W1001", "reason": "whim"})  # not in the enum


def is_other(request: Any) -> bool:
    return about("get_order")(request) and "#W1002" in request.messages[-1]["content"]


async def run(engine: ScriptedGenerator, **knobs: Any):
    trust = knobs.pop("trust", {})
    request = make_request(temperature=0.3, seed=5, trust=trust)
    budget = Budget(**knobs)
    return await Planner(engine).run(request, budget, rng=random.Random(1))


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
async def test_a_clean_anchor_is_committed_after_two_calls(mode: str) -> None:
    """The plain call (client sampling) rehearses clean: committed, nothing else is sampled."""
    engine = ScriptedGenerator().enqueue(acting(GET), role="act")
    engine.enqueue(imagined({"status": "pending"}))
    result = await run(engine, mode=mode, budget=4)
    plain = engine.requests[0]
    assert (plain.n, plain.temperature, plain.seed) == (1, 0.3, 5)
    assert (result.turn, result.commit_path, result.engine_calls) == (GET, "anchor", 2)
    assert (result.committed_rehearsed, result.early_exit) == (True, "anchor")
    assert result.summary()["commit_check"] == "ok"
    assert result.commit_unconditional is True


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
async def test_without_early_exit_the_budget_is_spent_and_the_anchor_still_decides(
    mode: str,
) -> None:
    """early_exit off: alternatives are sampled and walked, yet a fine anchor is committed."""
    engine = ScriptedGenerator().enqueue(acting(GET), role="act")
    engine.enqueue(acting(CANCEL) if mode == "sequential" else acting(CANCEL, OTHER), role="act")
    engine.enqueue(acting(OTHER), role="act")
    engine.enqueue(imagined({"status": "pending"}), match=about("get_order"))
    engine.enqueue(imagined({"status": "cancelled"}), match=about("cancel_order"))
    engine.enqueue(imagined({"status": "pending"}), match=is_other)
    result = await run(engine, mode=mode, budget=3, early_exit=False)
    assert (result.turn, result.commit_path, result.early_exit) == (GET, "anchor", None)
    assert len(result.trajectories) == 3
    assert len(engine.by_role("rehearse")) == 3


async def test_a_vetoed_anchor_is_replaced_by_a_clean_alternative() -> None:
    """Trusted imagination vetoes the anchor; K-1 alternatives are sampled and a clean one wins."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(OTHER), acting(OTHER, GET, CANCEL), role="act")
    engine.enqueue(imagined({"error": "order not found"}), match=is_other)
    engine.enqueue(imagined({"status": "pending"}), match=about("get_order"))
    engine.enqueue(imagined({"status": "cancelled"}), match=about("cancel_order"))
    result = await run(engine, budget=4)
    assert engine.by_role("act")[1].n == 3
    assert (result.turn, result.commit_path) == (GET, "replaced")
    assert result.commit_unconditional is False
    assert len(engine.by_role("rehearse")) == 3  # the anchor's repeat is not imagined again
    assert result.chosen_index == 2


async def test_sequential_alternatives_see_the_anchor_veto_and_stop_when_clean() -> None:
    """Sequential: attempt 2 reads the anchor's veto in the note; its clean action is committed."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(OTHER), acting(OTHER), acting(GET), role="act")
    engine.enqueue(veto("INVALID_PARAMETERS"), match=is_other)
    engine.enqueue(imagined({"status": "pending"}), match=about("get_order"))
    result = await run(engine, mode="sequential", budget=4)
    second, _third = engine.by_role("act")[1:]
    assert "outcome=veto:INVALID_PARAMETERS" in second.messages[-1]["content"]
    assert (result.turn, result.commit_path, len(engine.requests)) == (GET, "replaced", 5)


async def test_schema_invalid_anchor_costs_no_imagination() -> None:
    """A schema-invalid anchor is vetoed by the check (counted apart), then replaced."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(INVALID), acting(GET), role="act")
    engine.enqueue(imagined({"status": "pending"}), match=about("get_order"))
    result = await run(engine, budget=2)
    assert (result.turn, result.commit_path) == (GET, "replaced")
    assert (result.checked_vetoes, result.vetoes) == (1, 0)
    (observation,) = result.trajectories[0].steps[0].observations
    assert (observation.source, observation.code) == ("check", "SCHEMA_INVALID")
    assert len(engine.by_role("rehearse")) == 1


async def test_invalid_anchor_falls_back_to_a_valid_candidate_even_if_vetoed() -> None:
    """No clean alternative: a schema-valid (imagination-vetoed) call beats an invalid one."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(INVALID), acting(OTHER), role="act")
    engine.enqueue(veto("INVALID_PARAMETERS"), match=is_other)
    result = await run(engine, budget=2)
    assert (result.turn, result.commit_path, result.commit_check) == (OTHER, "valid_fallback", "ok")


async def test_a_fallback_to_a_tool_under_trust_off_says_trust_off() -> None:
    """The valid fallback for an invalid anchor is a tool nobody may imagine: path trust_off."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(INVALID), acting(OTHER), role="act")
    result = await run(engine, budget=2, trust={"get_order": "off"})
    assert (result.turn, result.commit_path, result.committed_rehearsed) == (
        OTHER,
        "trust_off",
        False,
    )
    assert result.why.startswith("valid_fallback, not imagined: trust switched")
    assert len(engine.by_role("rehearse")) == 0


@pytest.mark.parametrize(
    ("probe_rate", "calls", "path"), [(0.0, 1, "trust_off"), (1.0, 2, "anchor")]
)
async def test_an_ignored_tool_is_imagined_at_the_probe_rate(
    probe_rate: float, calls: int, path: str
) -> None:
    """Under ignore_vetoes imagination is only a probe for re-earning trust: mostly skipped."""
    engine = ScriptedGenerator().enqueue(acting(GET), role="act")
    engine.enqueue(imagined({"status": "pending"}))
    request = make_request(temperature=0.3, seed=5, trust={"get_order": "ignore_vetoes"})
    planner = Planner(engine, settings=PlannerSettings(probe_rate=probe_rate))
    result = await planner.run(request, Budget(budget=4), rng=random.Random(1))
    assert (result.turn, result.commit_path, result.engine_calls) == (GET, path, calls)


async def test_select_under_trust_off_says_trust_off() -> None:
    """``select``'s vote commits an unimagined call of a trust-off tool: path trust_off."""
    engine = ScriptedGenerator().enqueue(acting(GET, GET, OTHER), role="act")
    result = await run(engine, budget=3, commit="select", trust={"get_order": "off"})
    assert (result.turn, result.commit_path) == (GET, "trust_off")
    assert result.why.startswith("selected, not imagined")


async def test_nothing_valid_commits_the_anchor_and_says_so() -> None:
    """Every candidate schema-invalid, repair off: the anchor is committed; commit_check says so."""
    engine = ScriptedGenerator().enqueue(acting(INVALID), acting(INVALID), role="act")
    result = await run(engine, budget=2, repair=False)
    assert (result.turn, result.commit_path) == (INVALID, "anchor_vetoed")
    summary = result.summary()
    assert summary["commit_check"] == "schema_invalid"
    assert "reason" in result.to_dict()["commit_check_detail"]
    assert result.engine_calls == 2


async def test_a_vetoed_anchor_with_no_clean_alternative_is_kept() -> None:
    """Trusted vetoes everywhere: the anchor stays (what rehearsal off would have done)."""
    engine = ScriptedGenerator().enqueue(acting(OTHER), acting(CANCEL), role="act")
    engine.enqueue(veto("INVALID_PARAMETERS"), veto("TOOL_NOT_AVAILABLE"))
    result = await run(engine, budget=2)
    assert (result.turn, result.commit_path) == (OTHER, "anchor_vetoed")
    # kept only after the alternatives were weighed: its veto's real outcome is a selected sample
    assert result.commit_unconditional is False


@pytest.mark.parametrize("policy", ["learning", "ignore_vetoes"])
async def test_untrusted_vetoes_do_not_move_the_anchor(policy: str) -> None:
    """Imagination of a tool that is not trusted is recorded, not acted on."""
    engine = ScriptedGenerator().enqueue(acting(OTHER), role="act")
    engine.enqueue(veto("INVALID_PARAMETERS"))
    result = await run(engine, budget=4, trust={"get_order": policy})
    assert (result.turn, result.commit_path, result.engine_calls) == (OTHER, "anchor", 2)
    assert result.early_exit == "anchor"
    assert result.vetoes == 1
    assert result.trust == {"get_order": policy}
    # committed whatever its veto said: an unselected sample of that tool's vetoes
    assert result.to_dict()["commit_unconditional"] is True


async def test_trust_off_skips_imagination_of_the_tool() -> None:
    """A tool whose rehearsal trust switched off is committed unrehearsed, at one call."""
    engine = ScriptedGenerator().enqueue(acting(GET), role="act")
    result = await run(engine, budget=4, trust={"get_order": "off"})
    assert (result.turn, result.commit_path, result.engine_calls) == (GET, "trust_off", 1)
    assert result.committed_rehearsed is False
    assert result.trajectories[0].outcome == "unrehearsed"


async def test_an_answer_anchor_is_committed_unrehearsed() -> None:
    """A final-answer anchor: nothing to rehearse, committed as it is."""
    done = answer_turn("Your order is on its way.")
    engine = ScriptedGenerator().enqueue(acting(done), role="act")
    result = await run(engine, budget=4)
    assert (result.turn, result.commit_path, result.committed_rehearsed) == (done, "anchor", None)


async def test_a_failed_alternatives_call_keeps_the_anchor() -> None:
    """The alternatives' acting call fails: the fault is recorded and the anchor is kept."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(OTHER), GeneratorError("engine 2 down"), role="act")
    engine.enqueue(veto("INVALID_PARAMETERS"))
    result = await run(engine, budget=3)
    assert (result.turn, result.commit_path, result.degraded) == (
        OTHER,
        "anchor_vetoed",
        "engine_error",
    )


async def test_a_deadline_after_the_anchor_salvages_by_the_anchored_rule() -> None:
    """The deadline cuts the alternatives: the anchor's evidence decides, degraded."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(INVALID), role="act")
    engine.enqueue(acting(GET), role="act", delay=5.0)
    result = await run(engine, budget=2, deadline_ms=100)
    assert (result.turn, result.commit_path, result.degraded) == (INVALID, "salvaged", "deadline")
    assert result.why.startswith("degraded anchor kept")


async def test_a_deadline_in_select_salvages_by_select() -> None:
    """Select cut by the deadline keeps finished branches, ranked by evidence."""
    engine = ScriptedGenerator().enqueue(acting(GET, CANCEL), role="act")
    engine.enqueue(imagined({"status": "pending"}), match=about("get_order"))
    engine.enqueue(veto("X"), match=about("cancel_order"), delay=5.0)
    result = await run(engine, budget=2, commit="select", deadline_ms=100)
    assert (result.turn, result.commit_path) == (GET, "salvaged")


async def test_select_falls_back_to_least_bad_when_reflect_is_vetoed_too() -> None:
    """Every candidate and the reflected action vetoed: the least bad is committed, said so."""
    engine = ScriptedGenerator().enqueue(acting(OTHER, INVALID), role="act")
    engine.enqueue(veto("INVALID_PARAMETERS"), match=is_other)
    engine.enqueue(acting(CANCEL), role="commit")
    engine.enqueue(veto("INVALID_PARAMETERS"), match=about("cancel_order"))
    result = await run(engine, budget=2, commit="select")
    assert (result.turn, result.commit_path) == (OTHER, "least_bad")
    assert "did not rehearse clean" in result.why
    assert result.commit_unconditional is False  # chosen among candidates by their evidence


async def test_reflect_choosing_a_vetoed_action_falls_back_to_a_clean_one() -> None:
    """Reflect picks the action rehearsal vetoed: the clean candidate is committed instead."""
    engine = ScriptedGenerator().enqueue(acting(OTHER, GET), role="act")
    engine.enqueue(veto("INVALID_PARAMETERS"), match=is_other)
    engine.enqueue(imagined({"status": "pending"}), match=about("get_order"))
    engine.enqueue(acting(OTHER), role="commit")
    result = await run(engine, budget=2, commit="reflect")
    assert (result.turn, result.commit_path) == (GET, "reflect_fallback")
    assert result.why.startswith("reflect chose a ruled-out action")


async def test_reflect_answer_needs_no_verification() -> None:
    """A final answer from reflect is committed without an imagined call."""
    done = answer_turn("Done.")
    engine = ScriptedGenerator().enqueue(acting(OTHER, GET), role="act")
    engine.enqueue(imagined({"status": "pending"}), imagined({"status": "ok"}))
    engine.enqueue(acting(done), role="commit")
    result = await run(engine, budget=2, commit="reflect")
    assert (result.turn, result.commit_path) == (done, "reflected")
    assert len(engine.by_role("rehearse")) == 2


async def test_untrusted_vetoes_are_left_out_of_the_note() -> None:
    """The memory note carries no veto of a tool whose imagination is not trusted."""
    engine = ScriptedGenerator().enqueue(acting(OTHER, CANCEL), role="act")
    engine.enqueue(veto("INVALID_PARAMETERS"), match=is_other)
    engine.enqueue(imagined({"status": "cancelled"}), match=about("cancel_order"))
    engine.enqueue(acting(CANCEL), role="commit")
    result = await run(engine, budget=2, commit="reflect", trust={"get_order": "ignore_vetoes"})
    assert "outcome=veto" not in (result.memory_note or "")
    assert result.commit_path == "reflected"


async def test_a_continuation_checked_invalid_ends_the_walk() -> None:
    """At depth 2 the next acted step is schema-checked: invalid ends the walk, no imagining."""
    engine = ScriptedGenerator().enqueue(acting(GET), acting(INVALID), role="act")
    engine.enqueue(imagined({"status": "pending"}), match=about("get_order"))
    result = await run(engine, budget=1, depth=2)
    (trajectory,) = result.trajectories
    assert (trajectory.ended, trajectory.outcome, trajectory.score) == ("veto", "ok", 0.5)
    assert len(engine.by_role("rehearse")) == 1
    assert result.commit_path == "anchor"


async def test_a_continuation_on_a_trust_off_tool_is_skipped() -> None:
    """At depth 2 a step calling a trust-off tool is not imagined; the walk ends there."""
    engine = ScriptedGenerator().enqueue(acting(GET), acting(CANCEL), role="act")
    engine.enqueue(imagined({"status": "pending"}), match=about("get_order"))
    result = await run(engine, budget=1, depth=2, trust={"cancel_order": "off"})
    (trajectory,) = result.trajectories
    assert (trajectory.ended, trajectory.outcome) == ("skipped", "ok")


async def test_unanimous_invalid_candidates_do_not_exit_early() -> None:
    """Unanimity on an invalid call is no reason to commit it: select (repair off) reflects."""
    engine = ScriptedGenerator().enqueue(acting(INVALID, INVALID), role="act")
    engine.enqueue(acting(GET), role="commit")
    engine.enqueue(imagined({"status": "pending"}))
    result = await run(engine, budget=2, commit="select", repair=False)
    assert (result.turn, result.commit_path, result.early_exit) == (GET, "reflected", None)
