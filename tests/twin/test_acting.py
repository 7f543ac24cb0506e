"""The acting policy: plan steps, mistakes at the skill rate, memory notes, generic tools."""

from __future__ import annotations

import json
import random

import pytest

from rehearsal_gateway.twin.acting import ActingPolicy, ActingRequest
from rehearsal_gateway.twin.memory_note import MemoryNote
from rehearsal_gateway.twin.worlds import WORLD_NAMES, load_world

WORLDS = [load_world(n) for n in WORLD_NAMES]
RETAIL = load_world("retail")
TASK = RETAIL.tasks[0]  # get_order then cancel_order


def _request(messages, note=None, greedy=False, tool_choice=None, world=RETAIL):
    tools = {n: t.parameters for n, t in world.tools.items()}
    return ActingRequest(messages, tools, tool_choice, greedy, note)


def _opening(task=TASK):
    return [
        {"role": "system", "content": RETAIL.system_prompt},
        {"role": "user", "content": task.instruction},
    ]


def _after(call, result):
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": json.dumps(result)},
    ]


def test_perfect_skill_follows_the_plan_then_answers() -> None:
    """With skill 1 the policy walks the reference plan and then answers in text."""
    policy = ActingPolicy(WORLDS, skill=1.0)
    messages = _opening()
    state = RETAIL.new_state(TASK)
    for expected in TASK.plan:
        draft = policy.act(_request(messages), random.Random(0))
        assert draft.calls == (expected,)
        messages += _after(expected, RETAIL.call(state, expected.name, expected.arguments))
    final = policy.act(_request(messages), random.Random(0))
    assert final.calls == ()
    assert final.content == TASK.answer
    assert RETAIL.check(TASK, state)


def test_zero_skill_makes_planted_mistakes() -> None:
    """With skill 0 every choice is one of the step's planted mistakes."""
    policy = ActingPolicy(WORLDS, skill=0.0)
    mistakes = [m.call for m in RETAIL.mistakes(TASK, 0)]
    for seed in range(20):
        (call,) = policy.act(_request(_opening()), random.Random(seed)).calls
        assert call in mistakes


def test_skill_rate_is_respected() -> None:
    """At skill 0.7 about 70% of choices are the correct step."""
    policy = ActingPolicy(WORLDS, skill=0.7)
    hits = sum(
        policy.act(_request(_opening()), random.Random(s)).calls == (TASK.plan[0],)
        for s in range(400)
    )
    assert 0.6 < hits / 400 < 0.8


def test_greedy_takes_the_most_likely_action() -> None:
    """Temperature 0 picks the correct step whenever it is the mode."""
    policy = ActingPolicy(WORLDS, skill=0.4)
    for seed in range(10):
        draft = policy.act(_request(_opening(), greedy=True), random.Random(seed))
        assert draft.calls == (TASK.plan[0],)


def test_memory_note_makes_policy_avoid_vetoed_actions() -> None:
    """A note that marks every mistake as to-be-avoided leaves only the correct step."""
    policy = ActingPolicy(WORLDS, skill=0.0)
    avoid = frozenset(m.call.signature for m in RETAIL.mistakes(TASK, 0))
    note = MemoryNote(avoid=avoid, prefer=frozenset())
    for seed in range(20):
        draft = policy.act(_request(_opening(), note=note), random.Random(seed))
        assert draft.calls == (TASK.plan[0],)


def test_tool_choice_none_and_named() -> None:
    """tool_choice none answers in text; a named choice calls that tool."""
    policy = ActingPolicy(WORLDS, skill=1.0)
    assert policy.act(_request(_opening(), tool_choice="none"), random.Random(0)).calls == ()
    draft = policy.act(_request(_opening(), tool_choice="cancel_order"), random.Random(0))
    assert [c.name for c in draft.calls] == ["cancel_order"]


GENERIC = {
    "get_weather": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["c", "f"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
        },
        "required": ["city", "unit"],
    }
}


@pytest.mark.parametrize("seed", range(5))
def test_generic_tools_get_schema_valid_calls(seed: int) -> None:
    """Tools of no world get a call whose arguments satisfy the schema (at skill 1)."""
    policy = ActingPolicy(WORLDS, skill=1.0)
    request = ActingRequest([{"role": "user", "content": "weather?"}], GENERIC, None, False, None)
    (call,) = policy.act(request, random.Random(seed)).calls
    assert call.name == "get_weather"
    assert isinstance(call.arguments["city"], str)
    assert call.arguments["unit"] in ("c", "f")


def test_generic_tools_answer_after_a_tool_result() -> None:
    """Once a tool result follows the last user message, the generic policy answers."""
    policy = ActingPolicy(WORLDS, skill=1.0)
    messages = [{"role": "user", "content": "weather?"}]
    messages += _after(policy.act(ActingRequest(messages, GENERIC, None, False, None),
                                  random.Random(0)).calls[0], {"temp": 20})  # fmt: skip
    draft = policy.act(ActingRequest(messages, GENERIC, None, False, None), random.Random(0))
    assert draft.calls == ()
    assert draft.content
