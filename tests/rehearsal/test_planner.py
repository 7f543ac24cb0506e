"""Planner scenarios with the scripted generator: early exits, commits, depth, faults, deadlines."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest

from rehearsal_gateway.rehearsal.budget import Budget
from rehearsal_gateway.rehearsal.errors import GeneratorError
from rehearsal_gateway.rehearsal.memory import MemoryEntry
from rehearsal_gateway.rehearsal.planner import Planner
from rehearsal_gateway.rehearsal.prompts import GroundingObservation
from rehearsal_gateway.rehearsal.testing import (
    InMemoryStore,
    ScriptedGenerator,
    about,
    acting,
    answer_turn,
    imagined,
    multi_call_turn,
    raw_answer,
    tool_turn,
    veto,
)
from tests.rehearsal.conftest import CONVERSATION, make_request

GET = tool_turn("get_order", {"order_id": "#W1001"})
CANCEL = tool_turn("cancel_order", {"order_id": "#W1001", "reason": "no longer needed"})
# Schema-valid, but imagination predicts it fails (the order number is another customer's).
BAD_CANCEL = tool_turn("cancel_order", {"order_id": "#W1002", "reason": "no longer needed"})


def is_bad_cancel(request: Any) -> bool:
    return about("cancel_order")(request) and "#W1002" in request.messages[-1]["content"]


async def run(engine: ScriptedGenerator, rng: random.Random, store: Any = None, **knobs: Any):
    """The planner on the shared request; ``reflect`` unless a test asks for another commit."""
    request_fields = knobs.pop("request", {})
    knobs.setdefault("commit", "reflect")
    planner = Planner(engine, store)
    return await planner.run(make_request(**request_fields), Budget(**knobs), rng=rng)


async def test_unanimous_candidates_cost_exactly_one_engine_call(rng: random.Random) -> None:
    """K agreeing samples with early_exit commit at once: one engine call in total."""
    engine = ScriptedGenerator().enqueue(acting(GET, GET, GET, GET), role="act")
    result = await run(engine, rng, budget=4)
    assert len(engine.requests) == result.engine_calls == 1
    assert engine.requests[0].n == 4
    assert (result.turn, result.early_exit, result.chosen_index) == (GET, "unanimous", 0)
    assert result.summary()["early_exit"] is True


async def test_final_answer_majority_commits_the_answer(rng: random.Random) -> None:
    """More than half final answers: the first answer is committed without rehearsal."""
    done = answer_turn("It is cancelled.")
    engine = ScriptedGenerator().enqueue(acting(GET, done, done), role="act")
    result = await run(engine, rng, budget=3)
    assert (result.turn, result.early_exit, result.chosen_index) == (done, "answer", 1)
    assert len(engine.requests) == 1


async def test_vetoed_candidate_is_never_committed_under_select(rng: random.Random) -> None:
    """The most frequent action is vetoed, so select commits the clean minority action."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(BAD_CANCEL, BAD_CANCEL, GET), role="act")
    engine.enqueue(veto("INVALID_PARAMETERS"), match=is_bad_cancel)
    engine.enqueue(imagined({"status": "pending"}), match=about("get_order"))
    result = await run(engine, rng, budget=3, commit="select")
    assert result.turn == GET
    assert result.chosen_index == 2
    assert [t.outcome for t in result.trajectories] == ["veto:INVALID_PARAMETERS", "ok"]
    assert result.vetoes == 1
    assert len(engine.requests) == 3


async def test_select_when_every_candidate_is_vetoed_reflects_once(rng: random.Random) -> None:
    """With nothing clean left, select makes one memory-guided call rather than commit a veto."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(BAD_CANCEL, GET, BAD_CANCEL), role="act")
    engine.enqueue(veto("INVALID_PARAMETERS"), match=is_bad_cancel)
    engine.enqueue(imagined({"error": "no such order"}), match=about("get_order"))
    engine.enqueue(acting(CANCEL), role="commit")
    engine.enqueue(imagined({"status": "cancelled"}), match=about("cancel_order"))
    result = await run(engine, rng, budget=3, commit="select")
    assert (result.turn, result.commit_path) == (CANCEL, "reflected")
    assert len(engine.by_role("rehearse")) == 3  # the reflected action was verified too
    (commit,) = engine.by_role("commit")
    assert commit.messages[-1]["content"] == result.memory_note


async def test_select_when_every_candidate_is_vetoed_and_reflect_fails(
    rng: random.Random,
) -> None:
    """If that commit call fails too, select still commits the least bad action and degrades."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(BAD_CANCEL, GET, BAD_CANCEL), role="act")
    engine.enqueue(veto("INVALID_PARAMETERS"), match=is_bad_cancel)
    engine.enqueue(imagined({"error": "no such order"}), match=about("get_order"))
    engine.enqueue(GeneratorError("engine down", role="commit"), role="commit")
    result = await run(engine, rng, budget=3, commit="select")
    assert result.turn == BAD_CANCEL
    assert "every candidate" in result.why
    assert result.degraded == "engine_error"


async def test_reflect_sends_the_memory_note_after_the_conversation(rng: random.Random) -> None:
    """The commit call is the conversation plus the note as its last user message."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(BAD_CANCEL, GET), role="act")
    engine.enqueue(veto("INVALID_PARAMETERS"), match=is_bad_cancel)
    engine.enqueue(imagined({"status": "pending"}), match=about("get_order"))
    engine.enqueue(acting(CANCEL), role="commit")
    engine.enqueue(imagined({"status": "cancelled"}), match=about("cancel_order"))
    result = await run(engine, rng, budget=2)
    (commit,) = engine.by_role("commit")
    assert commit.messages[: len(CONVERSATION)] == CONVERSATION
    note = commit.messages[-1]
    assert note["role"] == "user"
    assert note["content"] == result.memory_note
    assert note["content"].startswith("<rehearsal_memory>\n")
    assert "[1] outcome=veto:INVALID_PARAMETERS score=0.00" in note["content"]
    assert commit.temperature == 0.2
    assert commit.tools is not None
    assert (result.turn, result.chosen_index, result.commit_path) == (CANCEL, 2, "reflected")
    assert result.committed_rehearsed is True  # the new action was imagined before committing


async def test_reflect_matching_a_candidate_reports_it(rng: random.Random) -> None:
    """When reflect commits a rehearsed action, the trace points at its trajectory."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(BAD_CANCEL, GET), role="act")
    engine.enqueue(veto("INVALID_PARAMETERS"), match=is_bad_cancel)
    engine.enqueue(imagined({"status": "pending"}), match=about("get_order"))
    engine.enqueue(acting(GET), role="commit")
    result = await run(engine, rng, budget=2)
    assert (result.chosen_index, result.chosen_trajectory) == (1, 1)


async def test_depth_three_ends_at_a_final_answer(rng: random.Random) -> None:
    """A trajectory acts on imagined observations until the model answers."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(GET), acting(CANCEL), acting(answer_turn("Cancelled.")), role="act")
    engine.enqueue(imagined({"status": "pending"}), match=about("get_order"))
    engine.enqueue(imagined({"status": "cancelled"}), match=about("cancel_order"))
    result = await run(engine, rng, budget=1, depth=3, commit="select")
    (trajectory,) = result.trajectories
    assert (trajectory.ended, trajectory.outcome, len(trajectory.steps)) == ("answer", "answer", 3)
    assert trajectory.score == 1.0
    second_act = engine.by_role("act")[1]
    assert second_act.messages[-2]["tool_calls"][0]["function"]["name"] == "get_order"
    assert second_act.messages[-1] == {
        "role": "tool",
        "tool_call_id": GET.tool_calls[0].id,
        "content": json.dumps({"status": "pending"}),
    }
    rehearse_cancel = engine.by_role("rehearse")[1].messages[1]["content"]
    assert 'Tool[get_order]: {"status": "pending"}' in rehearse_cancel
    assert len(engine.requests) == 1 + 1 + (1 + 1) + 1


async def test_depth_stops_at_a_later_veto(rng: random.Random) -> None:
    """A veto on a later step ends the walk; the first action stays ``ok`` at half score."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(GET), acting(BAD_CANCEL), role="act")
    engine.enqueue(imagined({"status": "pending"}), match=about("get_order"))
    engine.enqueue(veto("INVALID_PARAMETERS"), match=is_bad_cancel)
    result = await run(engine, rng, budget=1, depth=3, commit="select")
    (trajectory,) = result.trajectories
    assert (trajectory.ended, trajectory.outcome, trajectory.score) == ("veto", "ok", 0.5)
    assert result.turn == GET


async def test_sequential_attempts_see_earlier_memory(rng: random.Random) -> None:
    """Attempt i acts with the note of attempts 1..i-1 as the conversation's last message."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(BAD_CANCEL), acting(GET), acting(CANCEL), role="act")
    engine.enqueue(veto("INVALID_PARAMETERS"), match=is_bad_cancel)
    engine.enqueue(imagined({"status": "pending"}), match=about("get_order"))
    engine.enqueue(imagined({"status": "cancelled"}), match=about("cancel_order"))
    engine.enqueue(acting(CANCEL), role="commit")
    result = await run(engine, rng, mode="sequential", budget=3)
    first, second, third = engine.by_role("act")
    assert first.messages == CONVERSATION
    assert second.messages[:-1] == third.messages[:-1] == CONVERSATION
    assert second.messages[-1]["content"].count("outcome=") == 1
    assert "[1] outcome=veto:INVALID_PARAMETERS" in second.messages[-1]["content"]
    assert third.messages[-1]["content"].count("outcome=") == 2
    assert [t.samples for t in result.trajectories] == [(0,), (1,), (2,)]
    assert len(engine.requests) == 3 * 2 + 1


async def test_sequential_stops_when_an_attempt_agrees(rng: random.Random) -> None:
    """A clean attempt repeating the previous action is committed; no commit call."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(GET), acting(GET), role="act")
    engine.enqueue(imagined({"status": "pending"}), imagined({"status": "pending"}))
    result = await run(engine, rng, mode="sequential", budget=4)
    assert (result.early_exit, result.turn, result.chosen_index) == ("agreement", GET, 1)
    assert len(engine.requests) == 4


async def test_sequential_answers_need_no_rehearsal(rng: random.Random) -> None:
    """An attempt that answers is not rehearsed; two agreeing answers stop the loop."""
    done = answer_turn("Done.")
    engine = ScriptedGenerator().enqueue(acting(done), acting(done), role="act")
    result = await run(engine, rng, mode="sequential", budget=3)
    assert result.turn == done
    assert len(engine.requests) == 2


async def test_one_branch_engine_error_keeps_the_others(rng: random.Random) -> None:
    """A failing rehearsal branch is recorded; the other branch's result is kept and committed."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(CANCEL, GET), role="act")
    engine.enqueue(GeneratorError("engine 2 down"), match=about("cancel_order"))
    engine.enqueue(imagined({"status": "pending"}), match=about("get_order"), delay=0.01)
    result = await run(engine, rng, budget=2, commit="select")
    failed, intact = result.trajectories
    assert (failed.ended, failed.outcome) == ("engine_error", "open")
    assert (intact.ended, intact.outcome) == ("depth", "ok")
    assert intact.steps[0].observations[0].result == {"status": "pending"}
    assert result.degraded == "engine_error"
    assert result.turn == GET


async def test_continuation_engine_error_ends_only_that_walk(rng: random.Random) -> None:
    """An acting call failing at depth 2 leaves the trajectory open with its first step."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(GET), GeneratorError("gone"), role="act")
    engine.enqueue(imagined({"status": "pending"}), match=about("get_order"))
    result = await run(engine, rng, budget=1, depth=2, commit="select")
    (trajectory,) = result.trajectories
    assert (trajectory.ended, trajectory.outcome, trajectory.score) == ("engine_error", "open", 1.0)
    assert result.degraded == "engine_error"


async def test_deadline_commits_from_the_best_so_far(rng: random.Random) -> None:
    """When the deadline hits, finished branches are kept and select commits among them."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(CANCEL, GET), role="act")
    engine.enqueue(imagined({"status": "pending"}), match=about("get_order"))
    engine.enqueue(imagined({"status": "cancelled"}), match=about("cancel_order"), delay=5.0)
    before = asyncio.all_tasks()
    result = await run(engine, rng, budget=2, deadline_ms=100)
    assert asyncio.all_tasks() == before
    assert result.degraded == "deadline"
    slow, fast = result.trajectories
    assert (slow.ended, slow.outcome, slow.score) == ("deadline", "open", 0.5)
    assert fast.outcome == "ok"
    assert result.turn == GET
    assert result.why.startswith("degraded select")
    assert engine.by_role("commit") == []


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
async def test_deadline_bounds_rehearsal_not_the_reflect_commit(
    mode: str, rng: random.Random
) -> None:
    """A reflect call still running when the deadline passes is finished, not cut off.

    The commit may already be streaming to the client; cutting it would break a served answer.
    """
    engine = ScriptedGenerator()
    engine.enqueue(acting(BAD_CANCEL, GET), role="act")
    engine.enqueue(acting(GET), role="act")
    engine.enqueue(veto("INVALID_PARAMETERS"), match=is_bad_cancel)
    engine.enqueue(imagined({"status": "pending"}), match=about("get_order"))
    # The deadline is long enough for the scripted rehearsal on a loaded machine (100 ms was
    # not, once, on a fresh clone's first run), and the commit outlasts it.
    engine.enqueue(acting(GET), role="commit", delay=1.5)
    result = await run(engine, rng, mode=mode, budget=2, deadline_ms=1000, early_exit=False)
    assert (result.turn, result.degraded) == (GET, None)
    assert len(engine.by_role("commit")) == 1
    assert result.why.startswith("reflect")


async def test_deadline_before_any_candidate_falls_back_to_a_plain_call(
    rng: random.Random,
) -> None:
    """With nothing known at the deadline, one plain acting call with the client's sampling."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(GET, CANCEL), role="act", delay=5.0)
    engine.enqueue(acting(CANCEL), role="act")
    request = {"temperature": 0.9, "seed": 11}
    result = await run(engine, rng, budget=2, deadline_ms=50, request=request)
    plain = engine.requests[-1]
    assert (plain.n, plain.temperature, plain.seed) == (1, 0.9, 11)
    assert (result.turn, result.degraded, result.candidates) == (CANCEL, "deadline", ())


async def test_failed_first_call_falls_back_then_raises_when_all_fail(rng: random.Random) -> None:
    """A failed n=K call degrades to a plain call; if that fails too, the caller gets the error."""
    engine = ScriptedGenerator().enqueue(GeneratorError("down"), acting(GET), role="act")
    result = await run(engine, rng, budget=3)
    assert (result.turn, result.degraded) == (GET, "engine_error")
    engine = ScriptedGenerator().enqueue(GeneratorError("down"), GeneratorError("still"))
    with pytest.raises(GeneratorError, match="still"):
        await run(engine, rng, budget=3)


async def test_empty_engine_answer_counts_as_an_engine_error(rng: random.Random) -> None:
    """A response with no choices is a failed call, not a crash."""
    from rehearsal_gateway.rehearsal.messages import GenerationResponse

    engine = ScriptedGenerator().enqueue(GenerationResponse(()), acting(GET), role="act")
    result = await run(engine, rng, budget=2)
    assert (result.turn, result.degraded) == (GET, "engine_error")


async def test_reflect_failure_degrades_to_select(rng: random.Random) -> None:
    """A failed commit call falls back to the select rule."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(BAD_CANCEL, GET), role="act")
    engine.enqueue(veto("INVALID_PARAMETERS"), match=is_bad_cancel)
    engine.enqueue(imagined({"status": "pending"}), match=about("get_order"))
    engine.enqueue(GeneratorError("commit engine down"), role="commit")
    result = await run(engine, rng, budget=2)
    assert (result.turn, result.degraded, result.commit_path) == (
        GET,
        "engine_error",
        "reflect_fallback",
    )
    assert result.why.startswith("reflect failed; select")


async def test_sequential_later_attempt_failure_commits_what_is_known(rng: random.Random) -> None:
    """Attempt 2 failing stops the attempts; attempt 1 is still committed."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(GET), GeneratorError("down"), role="act")
    engine.enqueue(imagined({"status": "pending"}))
    result = await run(engine, rng, mode="sequential", budget=3, commit="select")
    assert (result.turn, result.degraded, len(result.trajectories)) == (GET, "engine_error", 1)


async def test_sequential_first_attempt_failure_falls_back(rng: random.Random) -> None:
    """Sequential with a failing first attempt degrades to one plain acting call."""
    engine = ScriptedGenerator().enqueue(GeneratorError("down"), acting(CANCEL), role="act")
    result = await run(engine, rng, mode="sequential", budget=3)
    assert (result.turn, result.degraded, result.trajectories) == (CANCEL, "engine_error", ())


async def test_answer_minority_is_kept_as_a_trajectory(rng: random.Random) -> None:
    """An answer that is not a majority is a trajectory with outcome ``answer``, not rehearsed."""
    done = answer_turn("Done.")
    engine = ScriptedGenerator()
    engine.enqueue(acting(GET, done, CANCEL), role="act")
    engine.enqueue(imagined({"status": "pending"}), imagined({"status": "cancelled"}))
    result = await run(engine, rng, budget=3, commit="select")
    assert [t.outcome for t in result.trajectories] == ["ok", "answer", "ok"]
    assert len(engine.by_role("rehearse")) == 2
    assert result.turn == done  # a frequency tie goes to the trajectory that reached an answer


async def test_grounding_is_fetched_once_per_tool_and_arguments(rng: random.Random) -> None:
    """The same call imagined twice in one rehearsal asks the store for grounding once."""
    store = InMemoryStore()
    engine = ScriptedGenerator()
    engine.enqueue(
        acting(
            multi_call_turn(("get_order", {"order_id": "#1"}), ("get_order", {"order_id": "#1"}))
        )
    )
    engine.enqueue(imagined({"status": "pending"}), imagined({"status": "pending"}))
    await run(engine, rng, store, budget=1, commit="select", request={"tenant": "t1"})
    assert store.calls.count("grounding") == 1


async def test_sequential_deadline_keeps_finished_attempts(rng: random.Random) -> None:
    """A deadline during attempt 2 commits attempt 1 by select."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(GET), role="act")
    engine.enqueue(acting(CANCEL), role="act", delay=5.0)
    engine.enqueue(imagined({"status": "pending"}))
    result = await run(engine, rng, mode="sequential", budget=3, deadline_ms=100)
    assert (result.turn, result.degraded) == (GET, "deadline")


async def test_foreign_timeout_errors_are_not_mistaken_for_the_deadline(
    rng: random.Random,
) -> None:
    """A TimeoutError raised by an adapter (not our deadline) propagates: it is a bug upstream."""
    engine = ScriptedGenerator().enqueue(TimeoutError("adapter forgot to translate"))
    with pytest.raises(TimeoutError):
        await run(engine, rng, budget=2)


@pytest.mark.parametrize(
    ("knobs", "request_fields"),
    [
        pytest.param({"mode": "off"}, {}, id="mode-off"),
        pytest.param({"budget": 0}, {}, id="budget-zero"),
        pytest.param({}, {"tools": ()}, id="no-tools"),
    ],
)
async def test_rehearsal_off_is_one_plain_call(
    rng: random.Random, knobs: dict[str, Any], request_fields: dict[str, Any]
) -> None:
    """Off, a zero budget or no tools: exactly one plain acting call and no degradation."""
    engine = ScriptedGenerator().enqueue(acting(GET))
    result = await run(engine, rng, request=request_fields, **knobs)
    assert (result.turn, result.engine_calls, result.degraded) == (GET, 1, None)
    assert result.why == "rehearsal off"


async def test_grounding_fills_the_few_shot_section(rng: random.Random) -> None:
    """Real results stored for the tenant appear as few-shot pairs in the rehearsal prompt."""
    store = InMemoryStore()
    store.add_grounding("t1", GroundingObservation("get_order", {"order_id": "#W9"}, {"s": "x"}))
    store.add_grounding("t1", GroundingObservation("get_order", {"order_id": "#W9"}, {"s": "y"}))
    engine = ScriptedGenerator()
    engine.enqueue(acting(GET, CANCEL), role="act")
    engine.enqueue(imagined({"status": "pending"}), imagined({"status": "cancelled"}))
    engine.enqueue(acting(GET), role="commit")
    result = await run(engine, rng, store, budget=2, request={"tenant": "t1"})
    prompts = [r.messages[1]["content"] for r in engine.by_role("rehearse")]
    assert any("Tool name:\nget_order\n" in p and '"s": "y"' in p for p in prompts)
    assert any("(few-shot): <unavailable>" in p for p in prompts)
    assert [o.examples for t in result.trajectories for o in t.steps[0].observations] == [1, 0]
    assert result.degraded is None


async def test_session_memory_recalls_real_failures_and_stores_nothing_imagined(
    rng: random.Random,
) -> None:
    """Real failures of the session join the note as facts; imagined entries are never stored."""
    store = InMemoryStore()
    real = MemoryEntry("error", 0.0, ("refund_all {}",), '{"error":"denied"}', source="real")
    imagined_old = MemoryEntry("veto:TOOL_NOT_AVAILABLE", 0.0, ("get_order {}",), None)
    real_ok = MemoryEntry("ok", 1.0, ("list_orders {}",), None, source="real")
    entries = [real.to_dict(), imagined_old.to_dict(), real_ok.to_dict(), {"junk": 1}]
    store.memory[("t1", "s1")] = entries
    engine = ScriptedGenerator()
    engine.enqueue(acting(GET, CANCEL), role="act")
    engine.enqueue(imagined({"status": "pending"}), imagined({"status": "cancelled"}))
    engine.enqueue(acting(GET), role="commit")
    result = await run(engine, rng, store, budget=2, request={"tenant": "t1", "session": "s1"})
    note = engine.by_role("commit")[0].messages[-1]["content"]
    assert "[3] outcome=error score=0.00\nseen: real tool result\naction: refund_all {}" in note
    assert "get_order {}" not in note  # an imagined veto of an earlier turn is not a fact
    assert "list_orders" not in note
    assert store.memory[("t1", "s1")] == entries
    assert "append_memory" not in store.calls
    assert result.degraded is None


@pytest.mark.parametrize("op", ["recent_memory", "grounding"])
async def test_store_failures_never_break_a_rehearsal(rng: random.Random, op: str) -> None:
    """Any store operation failing is recorded; the rehearsal completes without memory."""
    store = InMemoryStore()
    store.failing.add(op)
    engine = ScriptedGenerator()
    engine.enqueue(acting(GET, CANCEL), role="act")
    engine.enqueue(imagined({"status": "pending"}), imagined({"status": "cancelled"}))
    engine.enqueue(acting(GET), role="commit")
    request = {"tenant": "t1", "session": "s1"}
    result = await run(engine, rng, store, budget=2, request=request)
    assert result.turn == GET
    assert result.degraded == "store_unavailable"
    assert result.faults
    assert set(result.faults) == {f"store_error: {op} (ConnectionError)"}


async def test_unparsed_rehearsal_is_kept_in_the_trace(rng: random.Random) -> None:
    """An unreadable rehearsal answer is classified ``unparsed`` with its raw text kept."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(GET, CANCEL), role="act")
    engine.enqueue(raw_answer("I think it works."), match=about("get_order"))
    engine.enqueue(imagined({"status": "cancelled"}), match=about("cancel_order"))
    result = await run(engine, rng, budget=2, commit="select")
    bad = result.trajectories[0]
    assert bad.outcome == "unparsed"
    assert bad.steps[0].observations[0].raw == "I think it works."
    assert result.turn == CANCEL


async def test_result_is_json_serialisable(rng: random.Random) -> None:
    """The summary and the full trace survive json.dumps, with usage summed over roles."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(GET, CANCEL), role="act")
    engine.enqueue(imagined({"status": "pending"}), imagined({"status": "cancelled"}))
    engine.enqueue(acting(GET), role="commit")
    result = await run(engine, rng, budget=2, trace=True)
    trace = json.loads(json.dumps(result.to_dict()))
    assert trace["engine_calls"] == {"act": 1, "rehearse": 2, "commit": 1}
    assert trace["tokens"]["rehearse"] == {"prompt": 40, "completion": 16, "cached": 0}
    assert set(trace["latency_ms"]) == {"act", "rehearse", "commit", "total"}
    assert len(trace["trace"]) == 2
    assert result.usage.prompt == 10 + 40 + 10


async def test_seeds_are_reproducible_from_the_injected_rng() -> None:
    """The same seed gives the same engine seeds; another seed gives others."""

    async def seeds(seed: int) -> list[int | None]:
        engine = ScriptedGenerator()
        engine.enqueue(acting(GET, CANCEL), role="act")
        engine.enqueue(imagined({"a": 1}), imagined({"b": 2}))
        engine.enqueue(acting(GET), role="commit")
        await run(engine, random.Random(seed), budget=2)
        return [r.seed for r in engine.requests]

    assert await seeds(1) == await seeds(1)
    assert await seeds(1) != await seeds(2)
