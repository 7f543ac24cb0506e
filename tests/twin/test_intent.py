"""The twin plans from the user's own words: ids, e-mails and names choose and fill the call."""

from __future__ import annotations

import json
import random

import pytest

from rehearsal_gateway.twin.acting import ActingPolicy, ActingRequest
from rehearsal_gateway.twin.intent import Intent
from rehearsal_gateway.twin.worlds import WORLD_NAMES, load_world

WORLDS = [load_world(name) for name in WORLD_NAMES]
RETAIL = load_world("retail")
TOOLS = {name: tool.parameters for name, tool in RETAIL.tools.items()}
GET_ORDER = {"get_order": TOOLS["get_order"]}


@pytest.mark.parametrize(
    ("text", "plan"),
    [
        pytest.param("Where is order W1001?", [("get_order", {"order_id": "W1001"})], id="where"),
        pytest.param(
            "I want to exchange item I1002 in order W1004 for item I1003.",
            [("get_order", {"order_id": "W1004"}),
             ("exchange_item", {"order_id": "W1004", "item_id": "I1002", "new_item_id": "I1003"})],
            id="exchange",
        ),
        pytest.param(
            "Please cancel order W1002, I no longer need it.",
            [("get_order", {"order_id": "W1002"}),
             ("cancel_order", {"order_id": "W1002", "reason": "no_longer_needed"})],
            id="cancel-with-enum",
        ),
        pytest.param(
            "Return item I1002 and I1012 from order W1004.",
            [("get_order", {"order_id": "W1004"}),
             ("return_items", {"order_id": "W1004", "item_ids": ["I1002", "I1012"]})],
            id="list-of-ids",
        ),
        pytest.param("Cancel W1003: ordered by mistake",
                     [("get_order", {"order_id": "W1003"}),
                      ("cancel_order", {"order_id": "W1003", "reason": "ordered_by_mistake"})],
                     id="id-without-its-kind"),
        pytest.param("Hello, how are you?", [], id="nothing-to-go-on"),
    ],
)  # fmt: skip
def test_plans_from_the_words(text: str, plan: list[tuple[str, dict]]) -> None:
    """The plan's tools and arguments are the ones the sentence names."""
    assert [(call.name, call.arguments) for call in Intent.of(text).plan(TOOLS)] == plan


def _act(messages: list[dict], tools: dict, seed: int = 0, skill: float = 1.0):
    request = ActingRequest(messages, tools, None, False, None)
    return ActingPolicy(WORLDS, skill=skill).act(request, random.Random(seed))


@pytest.mark.parametrize("seed", range(5))
def test_a_tool_of_no_world_gets_the_id_from_the_question(seed: int) -> None:
    """README's question to a lone get_order tool looks up the order it names, on every seed."""
    draft = _act(
        [{"role": "user", "content": "What is the status of order W1001?"}], GET_ORDER, seed
    )
    assert [(c.name, c.arguments) for c in draft.calls] == [("get_order", {"order_id": "W1001"})]


def test_the_plan_goes_on_after_each_result_then_answers() -> None:
    """Read first, then the action, then a text answer, each after the previous real result."""
    messages = [{"role": "user", "content": "Please cancel order W1002, I no longer need it."}]
    state = RETAIL.new_state()
    made = []
    for _ in range(3):
        draft = _act(messages, TOOLS)
        if not draft.calls:
            break
        (call,) = draft.calls
        made.append(call.name)
        result = RETAIL.call(state, call.name, call.arguments)
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{len(made)}",
             "type": "function", "function": {"name": call.name,
                                              "arguments": json.dumps(call.arguments)}}]},
            {"role": "tool", "tool_call_id": f"c{len(made)}", "content": json.dumps(result)},
        ]  # fmt: skip
    assert made == ["get_order", "cancel_order"]
    assert state["orders"]["W1002"]["status"] == "cancelled"
    assert draft.content


def test_low_skill_still_makes_mistakes_on_a_read_plan() -> None:
    """At skill 0 a planned call is a plausible wrong one (schema-invalid), as elsewhere."""
    drafts = [_act([{"role": "user", "content": "Where is order W1001?"}], GET_ORDER, seed, 0.0)
              for seed in range(5)]  # fmt: skip
    assert all(d.calls[0].arguments != {"order_id": "W1001"} for d in drafts)
