"""Rehearsal by risk class: reads may go unimagined, destructive calls are held to more."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from rehearsal_gateway.rehearsal.budget import Budget
from rehearsal_gateway.rehearsal.confirm import HELD_PREFIX, asked_before, question
from rehearsal_gateway.rehearsal.errors import GeneratorError
from rehearsal_gateway.rehearsal.planner import Planner
from rehearsal_gateway.rehearsal.risk import ToolRisk, judging_trust
from rehearsal_gateway.rehearsal.testing import (
    ScriptedGenerator,
    about,
    acting,
    imagined,
    tool_turn,
    veto,
)
from tests.rehearsal.conftest import CONVERSATION, make_request

GET = tool_turn("get_order", {"order_id": "#W1001"})
CANCEL = tool_turn("cancel_order", {"order_id": "#W1001", "reason": "no longer needed"})
WRONG = tool_turn("cancel_order", {"order_id": "#W1401", "reason": "no longer needed"})
INVALID = tool_turn("cancel_order", {"order_id": "#W1001", "reason": "whim"})  # not in the enum
CLASSES = {
    "get_order": ToolRisk("read_only", "request"),
    "cancel_order": ToolRisk("destructive", "request"),
}
PENDING = {"status": "pending"}
CANCELLED = {"status": "cancelled"}


def is_wrong(request: Any) -> bool:
    return about("cancel_order")(request) and "#W1401" in request.messages[-1]["content"]


def is_right(request: Any) -> bool:
    return about("cancel_order")(request) and "#W1401" not in request.messages[-1]["content"]


async def run(engine: ScriptedGenerator, messages: Any = CONVERSATION, **knobs: Any) -> Any:
    trust = knobs.pop("trust", {})
    reads = knobs.pop("imagine_reads", True)
    classes = knobs.pop("classes", CLASSES)
    request = make_request(messages=messages, temperature=0.3, seed=5, trust=trust,
                           risk=classes, imagine_reads=reads)  # fmt: skip
    return await Planner(engine).run(request, Budget(**knobs), rng=random.Random(1))


# -- reads ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
async def test_an_unimagined_read_is_committed_after_one_call(mode: str) -> None:
    """Reads not imagined: the anchor read is committed on its own acting call, path ``read``."""
    engine = ScriptedGenerator().enqueue(acting(GET), role="act")
    result = await run(engine, mode=mode, imagine_reads=False)
    assert (result.turn, result.commit_path, result.engine_calls) == (GET, "read", 1)
    assert (result.committed_rehearsed, result.early_exit) == (False, "anchor")
    assert result.trajectories[0].ended == "read"


async def test_a_read_replaces_a_vetoed_write_unimagined() -> None:
    """A vetoed anchor gives way to a read the samples proposed, which costs no imagination."""
    engine = ScriptedGenerator().enqueue(acting(WRONG), acting(GET), role="act")
    engine.enqueue(imagined({"error": "order #W1401 not found"}), match=is_wrong)
    result = await run(engine, budget=2, imagine_reads=False)
    assert (result.turn, result.commit_path) == (GET, "replaced")
    assert len(engine.by_role("rehearse")) == 1


async def test_select_ranks_an_unimagined_read_with_clean_actions() -> None:
    """``select``: two samples of a read outvote one clean write; nothing is imagined for it."""
    engine = ScriptedGenerator().enqueue(acting(GET, GET, CANCEL), role="act")
    engine.enqueue(imagined(CANCELLED), match=about("cancel_order"))
    result = await run(engine, budget=3, commit="select", imagine_reads=False)
    assert (result.turn, result.commit_path) == (GET, "selected")


async def test_a_read_at_depth_two_ends_the_walk_as_read() -> None:
    """A walk's later read is not imagined either; the first step's evidence stands."""
    engine = ScriptedGenerator().enqueue(acting(CANCEL), acting(GET), role="act")
    engine.enqueue(imagined(CANCELLED), match=about("cancel_order"))
    result = await run(engine, budget=1, depth=2, imagine_reads=False)
    assert (result.turn, result.commit_path) == (CANCEL, "anchor")
    assert result.trajectories[0].ended == "read"


# -- destructive calls ----------------------------------------------------------------------


async def test_a_destructive_call_is_imagined_whatever_trust_switched_off() -> None:
    """Trust ``off`` saves a write's imagination, never a destructive call's."""
    engine = ScriptedGenerator().enqueue(acting(CANCEL), role="act")
    engine.enqueue(imagined(CANCELLED), match=about("cancel_order"))
    result = await run(engine, budget=1, trust={"cancel_order": "off"})
    assert (result.commit_path, result.committed_rehearsed) == ("anchor", True)
    write = {**CLASSES, "cancel_order": ToolRisk("write", "request")}
    engine = ScriptedGenerator().enqueue(acting(CANCEL), role="act")
    result = await run(engine, budget=1, trust={"cancel_order": "off"}, classes=write)
    assert (result.commit_path, result.committed_rehearsed) == ("trust_off", False)


@pytest.mark.parametrize(
    ("risk", "path"),
    [pytest.param("destructive", "replaced", id="destructive-acted-on"),
     pytest.param("write", "anchor", id="write-not-yet")],
)  # fmt: skip
async def test_a_learning_tools_imagined_failure_stops_a_destructive_call(
    risk: str, path: str
) -> None:
    """``learning`` is no measured unreliability: a destructive call's veto is acted on."""
    engine = ScriptedGenerator().enqueue(acting(WRONG), acting(CANCEL, CANCEL, CANCEL), role="act")
    engine.enqueue(imagined({"error": "order #W1401 not found"}), match=is_wrong)
    engine.enqueue(imagined(CANCELLED), match=is_right)
    classes = {**CLASSES, "cancel_order": ToolRisk(risk, "request")}  # type: ignore[arg-type]
    result = await run(engine, trust={"cancel_order": "learning"}, classes=classes)
    assert result.commit_path == path
    assert result.trust == {"cancel_order": "learning"}  # what the summary shows is unchanged


def test_only_measured_unreliability_keeps_a_destructive_veto_idle() -> None:
    """learning -> trusted for destructive tools; ignore_vetoes and off stay; others as they are."""
    trust = {"cancel_order": "learning", "get_order": "learning", "wipe": "ignore_vetoes"}
    assert judging_trust(trust, CLASSES) == {  # type: ignore[arg-type]
        "cancel_order": "trusted", "get_order": "learning", "wipe": "ignore_vetoes",
    }  # fmt: skip


async def test_a_destructive_anchor_without_a_majority_gives_way() -> None:
    """Imagined clean, but 1 of 4 samples: the alternatives are drawn and the read wins."""
    engine = ScriptedGenerator().enqueue(acting(WRONG), acting(GET, GET, WRONG), role="act")
    engine.enqueue(imagined(CANCELLED), match=is_wrong)
    result = await run(engine, imagine_reads=False)
    assert (result.turn, result.commit_path, result.early_exit) == (GET, "replaced", None)
    assert "only 2 of 4 samples chose this destructive call" in result.why


async def test_a_destructive_anchor_with_a_majority_is_committed() -> None:
    """3 of 4 samples agree: the anchor stands, kept whatever its imagination said."""
    engine = ScriptedGenerator().enqueue(acting(CANCEL), acting(CANCEL, GET, CANCEL), role="act")
    engine.enqueue(imagined(CANCELLED), match=about("cancel_order"))
    engine.enqueue(imagined(PENDING), match=about("get_order"))
    result = await run(engine)
    assert (result.turn, result.commit_path, result.commit_unconditional) == (
        CANCEL,
        "anchor",
        True,
    )


@pytest.mark.parametrize("confirm", [False, True])
async def test_an_outvoted_destructive_anchor_with_no_alternative(confirm: bool) -> None:
    """Nothing clean to commit instead: kept (weighed), or, with ``confirm``, asked about."""
    engine = ScriptedGenerator().enqueue(acting(WRONG), acting(INVALID), role="act")
    engine.enqueue(imagined(CANCELLED), match=is_wrong)
    result = await run(engine, budget=2, confirm=confirm)
    if not confirm:
        assert (result.turn, result.commit_path) == (WRONG, "anchor_vetoed")
        assert result.commit_unconditional is False
        assert result.summary()["held_for_confirmation"] is None
        return
    assert (result.commit_path, result.turn.tool_calls) == ("confirm", ())
    assert result.summary()["held_for_confirmation"] == [WRONG.tool_calls[0].to_dict()]
    assert "only 1 of 2 samples chose this destructive call" in (result.turn.content or "")
    assert HELD_PREFIX + WRONG.signature in (result.turn.content or "").splitlines()


OTHER = tool_turn("cancel_order", {"order_id": "#W1005", "reason": "no longer needed"})


async def test_an_outvoted_destructive_anchor_gives_way_to_a_read_imagined_failing() -> None:
    """No clean alternative, but a read: a failed read costs less than a wrong cancellation."""
    engine = ScriptedGenerator().enqueue(acting(WRONG), acting(GET, GET, GET), role="act")
    engine.enqueue(imagined(CANCELLED), match=is_wrong)
    engine.enqueue(imagined({"error": "order #W1001 not found"}), match=about("get_order"))
    result = await run(engine)
    assert (result.turn, result.commit_path) == (GET, "replaced")
    assert "only 1 of 4 samples chose this destructive call" in result.why
    assert "least bad" in result.why


async def test_an_outvoted_destructive_anchor_gives_way_to_one_sampled_more_often() -> None:
    """Destructive alternatives only, none backed by a majority: the one sampled more often
    than the anchor replaces it (a clean destructive replacement is not backed by imagination
    alone, but the policy chose it twice to the anchor's once)."""
    engine = ScriptedGenerator().enqueue(acting(WRONG), acting(CANCEL, OTHER, CANCEL), role="act")
    engine.enqueue(imagined(CANCELLED), match=about("cancel_order"))
    engine.enqueue(imagined(CANCELLED), match=about("cancel_order"))
    engine.enqueue(imagined(CANCELLED), match=about("cancel_order"))
    result = await run(engine)
    assert (result.turn, result.commit_path) == (CANCEL, "replaced")
    assert "sampled more often" in result.why


async def test_a_clean_read_replaces_an_invalid_anchor_before_an_unbacked_cancellation() -> None:
    """A vetoed anchor's replacement: a destructive one the samples did not back comes last."""
    engine = ScriptedGenerator().enqueue(acting(INVALID), acting(WRONG, GET, GET), role="act")
    engine.enqueue(imagined(CANCELLED), match=is_wrong)
    engine.enqueue(imagined(PENDING), match=about("get_order"))
    result = await run(engine, budget=4)
    assert (result.turn, result.commit_path) == (GET, "replaced")
    engine = ScriptedGenerator().enqueue(acting(INVALID), acting(CANCEL), role="act")
    engine.enqueue(imagined(CANCELLED), match=is_right)
    result = await run(engine, budget=2, repair=False)  # with repair, it is re-asked (below)
    assert (result.turn, result.commit_path) == (CANCEL, "replaced")  # all there is


@pytest.mark.parametrize(
    ("alternatives", "imagined_result"),
    [pytest.param((WRONG, WRONG), {"error": "order #W1401 not found"}, id="vetoed"),
     pytest.param((WRONG, INVALID), CANCELLED, id="outvoted")],
)  # fmt: skip
async def test_a_destructive_call_held_back_is_repaired_with_the_checks_message(
    alternatives: tuple[Any, ...], imagined_result: Any
) -> None:
    """The other candidates failed a check, and the destructive one is imagined failing or not
    backed: the model is re-asked with the check's message rather than committing either."""
    engine = ScriptedGenerator().enqueue(acting(INVALID), acting(*alternatives), role="act")
    engine.enqueue(imagined(imagined_result), match=is_wrong)
    engine.enqueue(acting(CANCEL), role="commit")
    engine.enqueue(imagined(CANCELLED), match=is_right)
    result = await run(engine, budget=3)
    assert (result.turn, result.commit_path) == (CANCEL, "repaired")
    told = json.loads(engine.by_role("commit")[0].messages[-1]["content"])
    assert told["error_tool_call"]["code"] == "SCHEMA_INVALID"


async def test_unanimous_destructive_candidates_are_still_imagined() -> None:
    """Parallel ``select``: no unanimous early exit for a destructive action."""
    engine = ScriptedGenerator().enqueue(acting(CANCEL, CANCEL), role="act")
    engine.enqueue(imagined(CANCELLED), match=about("cancel_order"))
    result = await run(engine, budget=2, commit="select")
    assert (result.commit_path, result.early_exit, result.committed_rehearsed) == (
        "selected", None, True,
    )  # fmt: skip


# -- confirm --------------------------------------------------------------------------------

FAILED = json.dumps({"error": "order #W1001 cannot be cancelled: shipped"})
CANCEL_FAILED = (
    *CONVERSATION,
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {
            "name": "cancel_order",
            "arguments": '{"order_id": "#W1001", "reason": "no longer needed"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": FAILED},
)  # fmt: skip


@pytest.mark.parametrize(
    ("script", "knobs", "reason"),
    [
        pytest.param("repeat", {"budget": 1}, "a check refused it (REAL_FAILURE_REPEATED: ",
                     id="check"),
        pytest.param("veto", {"budget": 1}, "rehearsal imagined it failing (INVALID_PARAMETERS",
                     id="imagined"),
        pytest.param("veto", {"budget": 1, "trust": {"cancel_order": "ignore_vetoes"}},
                     "proved unreliable", id="doubted"),
    ],
)  # fmt: skip
async def test_confirm_says_why_it_holds_the_call(
    script: str, knobs: dict[str, Any], reason: str
) -> None:
    """Each kind of evidence the rules could not act on reads as the question's reason."""
    engine = ScriptedGenerator().enqueue(acting(CANCEL), role="act")
    messages: Any = CONVERSATION
    if script == "repeat":
        messages = CANCEL_FAILED
    else:
        veto_ = veto("INVALID_PARAMETERS", "reason not accepted")
        engine.enqueue(veto_, match=about("cancel_order"))
    result = await run(engine, messages, confirm=True, **knobs)
    assert result.commit_path == "confirm"
    assert reason in (result.turn.content or "")
    assert result.turn.finish_reason == "stop"


async def test_confirm_leaves_clean_and_non_destructive_calls_alone() -> None:
    """A clean destructive call, or a write with evidence against it, is committed as ruled."""
    engine = ScriptedGenerator().enqueue(acting(CANCEL), role="act")
    engine.enqueue(imagined(CANCELLED), match=about("cancel_order"))
    assert (await run(engine, budget=1, confirm=True)).commit_path == "anchor"
    write = {**CLASSES, "cancel_order": ToolRisk("write", "request")}
    engine = ScriptedGenerator().enqueue(acting(CANCEL), role="act")
    engine.enqueue(veto("INVALID_PARAMETERS"), match=about("cancel_order"))
    result = await run(engine, budget=1, confirm=True, classes=write)
    assert result.commit_path == "anchor_vetoed"


async def test_confirm_has_nothing_to_say_of_an_unrehearsed_salvage() -> None:
    """The first acting call failed: the plain salvaged call was never weighed, so it goes out."""
    engine = ScriptedGenerator().enqueue(GeneratorError("engine down"), role="act")
    engine.enqueue(acting(CANCEL), role="act")
    result = await run(engine, budget=2, confirm=True)
    assert (result.turn, result.commit_path, result.degraded) == (
        CANCEL,
        "salvaged",
        "engine_error",
    )


async def test_a_call_held_once_and_answered_is_committed_the_next_time() -> None:
    """The user answered the question: the same call, with the same evidence, goes out."""
    held = question(CANCEL, "rehearsal imagined it failing")
    messages = (*CONVERSATION, held.to_message(), {"role": "user", "content": "Yes, go ahead."})
    assert asked_before(messages, CANCEL)
    assert not asked_before((*CONVERSATION, held.to_message()), CANCEL)  # not answered yet
    engine = ScriptedGenerator().enqueue(acting(CANCEL), role="act")
    engine.enqueue(veto("INVALID_PARAMETERS"), match=about("cancel_order"))
    result = await run(engine, messages, budget=1, confirm=True)
    assert (result.turn, result.commit_path) == (CANCEL, "anchor_vetoed")
