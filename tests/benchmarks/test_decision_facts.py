"""What the decisions benchmark reads from one response: schema checks, rehearsed or not, trust."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.chat import ChatCompletion

from benchmarks.decision_facts import (
    NO,
    YES,
    CallFacts,
    SchemaCheck,
    TurnFacts,
    enforced,
    plan_user,
)
from rehearsal_gateway.clients.agent import held_calls
from rehearsal_gateway.twin.worlds import load_world

RETAIL = SchemaCheck(load_world("retail"))
GET = ("get_order", {"order_id": "W1001"})
CANCEL = ("cancel_order", {"order_id": "W1001", "reason": "no_longer_needed"})
CANCEL_BAD = ("cancel_order", {"order_id": "W1001", "reason": "whim"})


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": "c1", "name": name, "arguments": json.dumps(arguments)}


def _trajectory(call: tuple[str, dict[str, Any]], outcome: str = "ok") -> dict[str, Any]:
    turn = {"content": None, "tool_calls": [_call(*call)]}
    return {"signature": "ignored", "outcome": outcome, "steps": [{"turn": turn}]}


def completion(
    committed: tuple[str, dict[str, Any]] | None, rehearsal: dict[str, Any] | None
) -> ChatCompletion:
    """A chat completion as the gateway returns it, through the openai SDK's own model."""
    message: dict[str, Any] = {"role": "assistant", "content": None if committed else "done"}
    if committed:
        function = {"name": committed[0], "arguments": json.dumps(committed[1])}
        message["tool_calls"] = [{"id": "call_1", "type": "function", "function": function}]
    body: dict[str, Any] = {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": message,
                     "finish_reason": "tool_calls" if committed else "stop"}],
    }  # fmt: skip
    if rehearsal is not None:
        body["rehearsal"] = {"id": "r1", "mode": "parallel", "early_exit": False, **rehearsal}
    return ChatCompletion.model_validate(body)


@pytest.mark.parametrize(
    ("call", "valid"),
    [
        pytest.param(CANCEL, True, id="valid"),
        pytest.param(CANCEL_BAD, False, id="enum"),
        pytest.param(("cancel_order", {"order_id": "W1001"}), False, id="missing"),
        pytest.param(("cancel_order", {**CANCEL[1], "x": 1}), False, id="undeclared"),
        pytest.param(("drop_table", {}), False, id="unknown-tool"),
    ],
)
def test_schema_check_is_what_the_tools_enforce(call: tuple[str, Any], valid: bool) -> None:
    """jsonschema with undeclared keys refused, as the world's tools refuse them."""
    assert RETAIL.valid(*call) is valid
    assert RETAIL.valid(call[0], json.dumps(call[1])) is valid
    assert RETAIL.valid("get_order", "{not json") is False


def test_enforced_keeps_an_explicit_additional_properties() -> None:
    """Only schemas silent about extra keys get additionalProperties: false."""
    schema = {"type": "object", "properties": {"a": {"type": "object", "properties": {}}}}
    assert enforced(schema)["additionalProperties"] is False
    assert enforced(schema)["properties"]["a"]["additionalProperties"] is False
    assert enforced({**schema, "additionalProperties": True})["additionalProperties"] is True
    assert "additionalProperties" not in enforced({"type": "object"})


def test_off_turn_has_no_rehearsal_facts() -> None:
    """A pass-through answer is judged on its schema only."""
    facts = TurnFacts.read(RETAIL, completion(CANCEL_BAD, None))
    assert (facts.rehearsed, facts.calls, facts.schema_invalid) == (False, 1, 1)
    assert facts.never_rehearsed is None
    assert facts.invalid_with_valid is None


def test_never_rehearsed_is_worked_out_from_the_trace() -> None:
    """Committed calls no trajectory started with are never-rehearsed; early exits are not."""
    trace = [_trajectory(GET), _trajectory(CANCEL_BAD, "veto:INVALID_PARAMETERS")]
    tried = TurnFacts.read(RETAIL, completion(GET, {"trace": trace}))
    assert tried.never_rehearsed is False
    untried = TurnFacts.read(RETAIL, completion(CANCEL, {"trace": trace}))
    assert untried.never_rehearsed is True
    early = TurnFacts.read(RETAIL, completion(CANCEL, {"trace": [], "early_exit": True}))
    assert early.never_rehearsed is False
    untraced = TurnFacts.read(RETAIL, completion(CANCEL, {}))
    assert untraced.never_rehearsed is None
    answer = TurnFacts.read(RETAIL, completion(None, {"trace": trace}))
    assert answer.never_rehearsed is False


def test_reported_fields_win_over_the_trace() -> None:
    """committed_rehearsed, commit_path, engine_calls and trust are read when reported."""
    reported = {
        "trace": [_trajectory(GET)], "committed_rehearsed": True, "commit_path": "verified",
        "commit_check": "ok", "checked_vetoes": 2, "engine_calls": 6,
        "trust": {"get_order": {"policy": "trusted"}, "cancel_order": {"policy": "learning"}},
    }  # fmt: skip
    facts = TurnFacts.read(RETAIL, completion(CANCEL, reported))
    assert facts.never_rehearsed is False
    assert (facts.engine_calls, facts.checked_vetoes) == (6, 2)
    assert (facts.commit_path, facts.commit_check, facts.low_trust) == ("verified", "ok", False)
    assert facts.committed_trust == "learning"
    low = {**reported, "committed_rehearsed": False, "trust": {"get_order": {"policy": "off"}}}
    facts = TurnFacts.read(RETAIL, completion(CANCEL, low))
    assert (facts.never_rehearsed, facts.low_trust) == (True, True)
    flat = {**reported, "trust": {"get_order": "trusted", "cancel_order": "ignore_vetoes"}}
    assert TurnFacts.read(RETAIL, completion(CANCEL, flat)).low_trust is True
    trust_off = {**low, "commit_path": "trust_off"}
    assert TurnFacts.read(RETAIL, completion(CANCEL, trust_off)).never_rehearsed is False


def test_invalid_commit_with_a_valid_rehearsed_candidate() -> None:
    """A schema-invalid commit counts apart when a schema-valid trajectory existed."""
    both = [_trajectory(CANCEL_BAD), _trajectory(CANCEL)]
    facts = TurnFacts.read(RETAIL, completion(CANCEL_BAD, {"trace": both}))
    assert (facts.schema_invalid, facts.invalid_with_valid) == (1, True)
    only_bad = [_trajectory(CANCEL_BAD)]
    facts = TurnFacts.read(RETAIL, completion(CANCEL_BAD, {"trace": only_bad}))
    assert (facts.schema_invalid, facts.invalid_with_valid) == (1, False)
    facts = TurnFacts.read(RETAIL, completion(CANCEL, {"trace": both}))
    assert (facts.schema_invalid, facts.invalid_with_valid) == (0, False)


def _sig(call: tuple[str, dict[str, Any]]) -> str:
    return f"{call[0]} {json.dumps(call[1], sort_keys=True, separators=(',', ':'))}"


def test_a_repeat_counts_apart_when_another_candidate_existed() -> None:
    """A repeat of a standing real failure, judged against what its turn's trace offered."""
    retail = load_world("retail")
    task = retail.tasks[0]
    answer = {"content": "done", "tool_calls": []}
    trace = [
        _trajectory(CANCEL, "veto:REAL_FAILURE_REPEATED"),
        _trajectory(CANCEL_BAD),
        {"signature": "a", "outcome": "answer", "steps": [{"turn": answer}]},
    ]
    offered = TurnFacts.read(RETAIL, completion(CANCEL, {"trace": trace})).options
    assert offered == frozenset({_sig(CANCEL), "ANSWER"})  # the invalid one is no option
    alone = TurnFacts.read(RETAIL, completion(CANCEL, {"trace": trace[:2]})).options
    assert TurnFacts.read(RETAIL, completion(CANCEL, None)).options is None
    calls = [("cancel_order", _sig(CANCEL), True), ("cancel_order", _sig(CANCEL), True)]
    judged = CallFacts.judge(retail, task, calls, [None, offered])
    assert (judged.repeats, judged.repeats_avoidable) == (1, 1)
    judged = CallFacts.judge(retail, task, calls, [None, alone])
    assert (judged.repeats, judged.repeats_avoidable) == (1, 0)
    judged = CallFacts.judge(retail, task, calls, [offered, None])
    assert (judged.repeats, judged.repeats_avoidable) == (1, None)  # no trace: unknown
    assert CallFacts.judge(retail, task, calls).repeats_avoidable is None
    assert CallFacts.judge(retail, task, calls[:1]).repeats_avoidable == 0


def test_options_follow_the_calls_each_turn_committed() -> None:
    """Each call of a turn gets its turn's options; an answer turn runs no call."""
    two = TurnFacts(calls=2, schema_invalid=0, invalid_with_valid=None, never_rehearsed=None,
                    rehearsed=True, options=frozenset({"a"}))  # fmt: skip
    none = TurnFacts(calls=0, schema_invalid=0, invalid_with_valid=None, never_rehearsed=None,
                     rehearsed=False)  # fmt: skip
    assert CallFacts.options_per_call([two, none]) == [frozenset({"a"}), frozenset({"a"})]


def test_the_plan_user_confirms_only_what_the_task_asked_for() -> None:
    """Yes when every held call is in the task's plan; a tempting cancellation gets a no."""
    retail = load_world("retail")
    task = next(t for t in retail.tempting_tasks)
    assert plan_user(task, tuple(c.signature for c in task.plan)) == YES
    assert plan_user(task, (task.tempting[0].signature,)) == NO
    assert plan_user(task, (task.plan[0].signature, task.tempting[0].signature)) == NO


def test_held_calls_are_read_from_the_summary_as_signatures() -> None:
    """The agent reads ``held_for_confirmation`` into the signatures the user is asked about."""
    held = [{"id": "c1", "name": "cancel_order",
             "arguments": '{"reason": "no_longer_needed", "order_id": "W1001"}'}]  # fmt: skip
    asked = completion(None, {"commit_path": "confirm", "held_for_confirmation": held})
    assert held_calls(asked) == (_sig(CANCEL),)
    assert held_calls(completion(None, {"commit_path": "anchor"})) == ()
    assert held_calls(completion(None, None)) == ()
