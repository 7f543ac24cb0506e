"""Real results are facts: a call that already failed for real is vetoed before imagination."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from rehearsal_gateway.rehearsal.budget import Budget
from rehearsal_gateway.rehearsal.commit import evidence, least_bad
from rehearsal_gateway.rehearsal.errors import GeneratorError
from rehearsal_gateway.rehearsal.hindsight import (
    REPEAT_CODE,
    content_text,
    real_error,
    real_failures,
)
from rehearsal_gateway.rehearsal.planner import Planner
from rehearsal_gateway.rehearsal.request import RehearsalRequest
from rehearsal_gateway.rehearsal.testing import (
    ScriptedGenerator,
    about,
    acting,
    imagined,
    tool_turn,
    veto,
)
from rehearsal_gateway.rehearsal.trace import ImaginedObservation, Step, Trajectory

AIRLINE_TOOLS: tuple[dict[str, Any], ...] = tuple(
    {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {
                "type": "object",
                "properties": {"reservation_id": {"type": "string"}},
                "required": ["reservation_id"],
            },
        },
    }
    for name in ("cancel_reservation", "get_reservation_details")
)
CANCEL = tool_turn("cancel_reservation", {"reservation_id": "R2402"})
DETAILS = tool_turn("get_reservation_details", {"reservation_id": "R2402"})
FAILED = json.dumps({"error": "reservation R2402 cannot be cancelled: basic economy"})


def call(name: str, arguments: str, call_id: str) -> dict[str, Any]:
    """An assistant message with one tool call, as a client sends it back."""
    function = {"name": name, "arguments": arguments}
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": function}]}  # fmt: skip


def tool_result(call_id: str, content: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


USER = {"role": "user", "content": "Cancel my reservation R2402, please."}
CANCEL_FAILED = (
    USER,
    call("cancel_reservation", '{"reservation_id": "R2402"}', "c1"),
    tool_result("c1", FAILED),
)
CANCEL_SIG = CANCEL.signature


async def run(engine: ScriptedGenerator, messages: tuple[dict[str, Any], ...], **knobs: Any):
    request = RehearsalRequest(messages=messages, tools=AIRLINE_TOOLS, temperature=0.3, seed=5)
    return await Planner(engine).run(request, Budget(**knobs), rng=random.Random(1))


@pytest.mark.parametrize(
    ("messages", "standing"),
    [
        pytest.param(CANCEL_FAILED, {CANCEL_SIG}, id="failure-stands"),
        pytest.param(
            (*CANCEL_FAILED, call("cancel_reservation", '{ "reservation_id":"R2402" }', "c2"),
             tool_result("c2", "Error: still basic economy")),
            {CANCEL_SIG}, id="a-repeat-keeps-it",
        ),
        pytest.param(
            (*CANCEL_FAILED, call("get_reservation_details", '{"reservation_id": "R2402"}', "c2"),
             tool_result("c2", '{"cabin": "basic_economy"}')),
            set(), id="another-call-since",
        ),
        pytest.param(
            (*CANCEL_FAILED, call("get_reservation_details", '{"reservation_id": "R1"}', "c2"),
             tool_result("c2", '{"error": "not found"}')),
            {'get_reservation_details {"reservation_id":"R1"}', CANCEL_SIG},
            id="another-failure-since",  # a failed call changed nothing: both stand
        ),
        pytest.param((*CANCEL_FAILED, USER), set(), id="a-user-message-since"),
        pytest.param(
            (USER, call("cancel_reservation", '{"reservation_id": "R2402"}', "c1"),
             tool_result("c1", '{"status": "cancelled"}')),
            set(), id="it-succeeded",
        ),
        pytest.param(
            (*CANCEL_FAILED, call("get_reservation_details", '{"reservation_id": "R2402"}', "c2")),
            set(), id="a-call-without-result-since",
        ),
        pytest.param(
            (USER, {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "function": {"name": "cancel_reservation",
                                          "arguments": '{"reservation_id": "R2402"}'}},
                {"id": "c2", "function": {"name": "get_reservation_details",
                                          "arguments": '{"reservation_id": "R2402"}'}}]},
             tool_result("c1", FAILED), tool_result("c2", "{}")),
            set(), id="a-success-in-the-same-turn",
        ),
        pytest.param(
            (USER, {"role": "assistant", "tool_calls": [
                "junk", {"id": "c0"}, {"id": "c1", "function": {
                    "name": "cancel_reservation", "arguments": {"reservation_id": "R2402"}}}]},
             tool_result("c1", [{"type": "text", "text": "error: "}, {"text": "no"}])),
            {CANCEL_SIG}, id="object-arguments-and-content-parts",
        ),
        pytest.param(
            (USER, {"role": "assistant", "content": "Which reservation?"}), set(), id="no-calls"
        ),
    ],
)  # fmt: skip
def test_which_real_failures_stand(messages: tuple[Any, ...], standing: set[str]) -> None:
    """A failure stands until a call that went through, or a user message, may have changed
    things; a call that failed changed nothing."""
    assert set(real_failures(messages)) == standing


@pytest.mark.parametrize(
    ("real", "failed"),
    [({"error": "x"}, True), ({"error_tool_call": {}}, True), ("  Error: no", True),
     ({"ok": 1}, False), ("done", False), (None, False), ([1], False)],
)  # fmt: skip
def test_real_error_is_one_definition(real: Any, failed: bool) -> None:
    """An ``error`` field or text starting with "error" is a real failure; nothing else is."""
    assert real_error(real) is failed


def test_content_text_reads_every_content_shape() -> None:
    """Strings, text parts, null and other values all read as text."""
    parts = [{"type": "text", "text": "a"}, {"type": "image"}, "junk"]
    assert (content_text("s"), content_text(parts), content_text(None), content_text(3)) == (
        "s", "a", "", "3",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("mode", "commit"),
    [("parallel", "anchored"), ("sequential", "anchored"), ("parallel", "select")],
)
async def test_a_cancel_that_failed_for_real_is_not_committed_again(mode: str, commit: str) -> None:
    """The airline case: the repeated cancel is vetoed unimagined and the alternative committed."""
    engine = ScriptedGenerator()
    if commit == "anchored":
        engine.enqueue(acting(CANCEL), role="act")
    alternatives = (CANCEL, DETAILS) if mode == "parallel" else (DETAILS,)
    engine.enqueue(acting(*alternatives), role="act")
    engine.enqueue(imagined({"cabin": "basic_economy"}), match=about("get_reservation_details"))
    result = await run(engine, CANCEL_FAILED, mode=mode, budget=3, commit=commit)
    assert result.turn == DETAILS
    assert result.commit_path == ("replaced" if commit == "anchored" else "selected")
    assert len(engine.by_role("rehearse")) == 1  # the repeat cost no imagination
    assert result.summary()["checked_veto_codes"] == {REPEAT_CODE: 1}
    assert result.checked_vetoes == 1
    (observation,) = result.trajectories[0].steps[0].observations
    assert (observation.source, observation.code) == ("check", REPEAT_CODE)
    assert "basic economy" in observation.detail
    assert evidence(result.trajectories[0], {}) == "repeated_failure"


async def test_a_repeat_after_another_committed_call_is_rehearsed_as_usual() -> None:
    """Another call since the failure may have changed the world: the cancel is imagined again."""
    since = (
        *CANCEL_FAILED,
        call("get_reservation_details", '{"reservation_id": "R2402"}', "c2"),
        tool_result("c2", '{"cabin": "economy"}'),
    )
    engine = ScriptedGenerator().enqueue(acting(CANCEL), role="act")
    engine.enqueue(imagined({"status": "cancelled"}), match=about("cancel_reservation"))
    result = await run(engine, since, budget=3)
    assert (result.turn, result.commit_path, result.checked_vetoes) == (CANCEL, "anchor", 0)


async def test_a_repeat_anchor_gives_way_even_to_an_imagined_veto() -> None:
    """No clean alternative, repair off: a prediction against it beats a fact against the anchor."""
    engine = ScriptedGenerator().enqueue(acting(CANCEL), acting(DETAILS), role="act")
    engine.enqueue(veto("INVALID_PARAMETERS"), match=about("get_reservation_details"))
    result = await run(engine, CANCEL_FAILED, budget=2, repair=False)
    assert (result.turn, result.commit_path) == (DETAILS, "valid_fallback")


async def test_a_repeat_and_nothing_else_is_committed_and_says_so() -> None:
    """Every sample repeats the failure and repair is off: the anchor stays, flagged."""
    engine = ScriptedGenerator().enqueue(acting(CANCEL), acting(CANCEL), role="act")
    result = await run(engine, CANCEL_FAILED, budget=2, repair=False)
    assert (result.turn, result.commit_path, result.engine_calls) == (CANCEL, "anchor_vetoed", 2)


def _trajectory(index: int, code: str | None, verdict: str = "veto") -> Trajectory:
    turn = tool_turn("get_reservation_details", {"reservation_id": f"R{index}"})
    source = "imagined" if code is None else "check"
    observation = ImaginedObservation(
        turn.tool_calls[0], verdict,  # type: ignore[arg-type]
        code=code or "INVALID_PARAMETERS", source=source,  # type: ignore[arg-type]
    )  # fmt: skip
    return Trajectory(index, (index,), (Step(turn, (observation,)),), "veto")


def test_least_bad_ranks_a_veto_before_a_repeat_before_an_invalid_call() -> None:
    """Schema-valid first, then a non-repeat: invalid < repeated_failure < vetoed."""
    invalid, repeat, vetoed = (
        _trajectory(0, "SCHEMA_INVALID"), _trajectory(1, REPEAT_CODE), _trajectory(2, None)
    )  # fmt: skip
    assert least_bad([invalid, repeat, vetoed], {}).trajectory.index == 2
    assert least_bad([invalid, repeat], {}).trajectory.index == 1
    assert [evidence(t, {}) for t in (invalid, repeat, vetoed)] == [
        "invalid", "repeated_failure", "vetoed",
    ]  # fmt: skip


async def run_learning(engine: ScriptedGenerator, **knobs: Any):
    """As ``run``, the tools' trust still being earned (``learning``)."""
    trust = dict.fromkeys(("cancel_reservation", "get_reservation_details"), "learning")
    request = RehearsalRequest(messages=CANCEL_FAILED, tools=AIRLINE_TOOLS, temperature=0.3,
                               seed=5, trust=trust)  # fmt: skip
    return await Planner(engine).run(request, Budget(**knobs), rng=random.Random(1))


async def test_a_repeated_anchor_is_imagined_once_for_trust_when_there_is_room() -> None:
    """The probe: the repeat's imagination goes to ``probes``, never into the decision."""
    engine = ScriptedGenerator().enqueue(acting(CANCEL), role="act")
    engine.enqueue(imagined({"status": "cancelled"}), match=about("cancel_reservation"))
    result = await run_learning(engine, budget=1)
    assert (result.turn, result.commit_path, result.engine_calls) == (CANCEL, "anchor_vetoed", 2)
    (probe,) = result.probes
    assert (probe.call.signature, probe.outcome, probe.source) == (CANCEL_SIG, "ok", "imagined")
    assert result.to_dict()["hindsight_probes"][0]["outcome"] == "ok"
    assert result.vetoes == 0  # not a trajectory's observation: counted nowhere else


async def test_no_probe_when_a_repair_spent_the_room() -> None:
    """K = 2: anchor, alternative, repair and its imagination fill the engine-call bound."""
    engine = ScriptedGenerator().enqueue(acting(CANCEL), acting(CANCEL), role="act")
    engine.enqueue(acting(DETAILS), role="commit")
    engine.enqueue(imagined({"cabin": "basic_economy"}), match=about("get_reservation_details"))
    result = await run_learning(engine, budget=2)
    assert (result.turn, result.commit_path, result.probes) == (DETAILS, "repaired", ())
    assert result.engine_calls == Budget(budget=2).max_engine_calls()


async def test_a_failed_probe_is_a_fault_not_a_failure() -> None:
    """The probe's engine error is recorded; the commit stands."""
    engine = ScriptedGenerator().enqueue(acting(CANCEL), role="act")
    engine.enqueue(GeneratorError("engine down"), role="rehearse")
    result = await run_learning(engine, budget=1)
    assert (result.commit_path, result.probes) == ("anchor_vetoed", ())
    assert result.faults == ("engine_error: hindsight probe: engine down",)
