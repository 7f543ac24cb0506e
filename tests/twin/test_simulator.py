"""The rehearsal role: section parsing, vetoes, world replay and fidelity."""

from __future__ import annotations

import json
import random

import pytest

from tests.twin.conftest import rehearsal_text
from twin.simulator import MalformedRehearsal, Simulator, is_rehearsal, parse_prompt
from twin.worlds import WORLD_NAMES, load_world

WORLDS = [load_world(n) for n in WORLD_NAMES]
RETAIL = load_world("retail")
TOOLS = RETAIL.tool_schemas()
TASK = RETAIL.tasks[0]
HISTORY_READ = (
    f"User: {TASK.instruction}\n\n"
    'Assistant: \n<tool_call>\n{"name": "get_order", "arguments": {"order_id": "W1001"}}\n'
    "</tool_call>\n\n"
    'Tool[get_order]: {"order_id": "W1001", "status": "pending"}'
)


def _imagine(text: str, fidelity: float = 1.0, seed: int = 0):
    return Simulator(WORLDS, fidelity).imagine(parse_prompt(text), random.Random(seed))[1]


def test_prompt_is_recognised_and_parsed() -> None:
    """The labelled sections yield tools, first user message, history calls and the call."""
    text = rehearsal_text(TOOLS, HISTORY_READ, "cancel_order", {"order_id": "W1001"})
    assert is_rehearsal(text)
    prompt = parse_prompt(text)
    assert set(prompt.tools) == set(RETAIL.tools)
    assert prompt.first_user == TASK.instruction
    assert [c.name for c in prompt.history_calls] == ["get_order"]
    assert prompt.name == "cancel_order"


def test_history_is_replayed_before_the_call() -> None:
    """A write after its validating read (in the history) imagines the true success."""
    args = {"order_id": "W1001", "reason": "no_longer_needed"}
    result = _imagine(rehearsal_text(TOOLS, HISTORY_READ, "cancel_order", args))
    assert result == {"order_id": "W1001", "status": "cancelled"}
    without_read = f"User: {TASK.instruction}"
    result = _imagine(rehearsal_text(TOOLS, without_read, "cancel_order", args))
    assert "before" in result["error"]


@pytest.mark.parametrize(
    ("name", "arguments", "code"),
    [
        pytest.param("drop_table", {}, "TOOL_NOT_AVAILABLE", id="unknown-tool"),
        pytest.param("cancel_order", {"order_id": "W1001"}, "INVALID_PARAMETERS", id="missing"),
        pytest.param(
            "cancel_order",
            {"order_id": 5, "reason": "no_longer_needed"},
            "INVALID_PARAMETERS",
            id="wrong-type",
        ),
        pytest.param(
            "cancel_order",
            {"order_id": "W1001", "reason": "whim"},
            "INVALID_PARAMETERS",
            id="wrong-enum",
        ),
        pytest.param("cancel_order", '{"order_id": ', "INVALID_TOOL_CALL_FORMAT", id="malformed"),
    ],
)
def test_invalid_calls_are_vetoed(name: str, arguments: object, code: str) -> None:
    """Calls failing validation come back as error_tool_call vetoes with EnvACE codes."""
    text = rehearsal_text(TOOLS, HISTORY_READ, name, arguments, schema={})
    assert _imagine(text)["error_tool_call"]["code"] == code


def test_low_fidelity_returns_plausible_wrong_results() -> None:
    """At fidelity 0 the imagined result differs from the truth; at 1 it never does."""
    text = rehearsal_text(TOOLS, f"User: {TASK.instruction}", "get_order", {"order_id": "W1001"})
    truth = _imagine(text, fidelity=1.0)
    assert truth["status"] == "pending"
    assert all(_imagine(text, fidelity=0.0, seed=s) != truth for s in range(10))


def test_generic_tools_get_a_synthesised_result() -> None:
    """Tools of no world get a schema-consistent, non-empty object."""
    tools = [{"type": "function", "function": {"name": "ping", "parameters": {"type": "object"}}}]
    result = _imagine(rehearsal_text(tools, "User: ping it", "ping", {"host": "a"}))
    assert result["status"] == "ok"
    assert result["tool"] == "ping"


def test_label_variants_are_tolerated() -> None:
    """Case, spacing and bare-function tool lists do not break parsing."""
    text = rehearsal_text(TOOLS, HISTORY_READ, "get_user", {"user_id": "U1001"})
    text = text.replace("Current tool to simulate:", "CURRENT TOOL TO SIMULATE :")
    text = text.replace("- name: get_user", "- name:\nget_user").removesuffix("\n\n/think")
    bare = json.dumps([t["function"] for t in TOOLS])
    text = text.replace(json.dumps(TOOLS, ensure_ascii=True, indent=0), bare)
    assert parse_prompt(text).name == "get_user"


MALFORMED = [
    pytest.param(lambda t: t.replace("Current tool to simulate:", "Tool:"), id="no-current"),
    pytest.param(lambda t: t.replace("Current conversation history:", ""), id="no-history"),
    pytest.param(lambda t: t.replace('"type": "function"', '"type": function'), id="tools-json"),
    pytest.param(
        lambda t: t.replace("- input schema (JSON Schema):\n{", "- input schema:\n{{"),
        id="schema-json",
    ),
    pytest.param(lambda t: t.split("RL model")[0], id="truncated"),
]


@pytest.mark.parametrize("mangle", MALFORMED)
def test_malformed_sections_raise_malformed_rehearsal(mangle) -> None:
    """Unreadable sections raise MalformedRehearsal, never another exception."""
    text = rehearsal_text(TOOLS, HISTORY_READ, "get_order", {"order_id": "W1001"})
    with pytest.raises(MalformedRehearsal):
        parse_prompt(mangle(text))


def test_gateway_core_prompt_is_understood() -> None:
    """A prompt built by the rehearsal core's own builder parses and replays in the twin."""
    from rehearsal.messages import AssistantTurn, ToolCall
    from rehearsal.prompts import rehearsal_user_prompt

    history = [
        {"role": "system", "content": RETAIL.system_prompt},
        {"role": "user", "content": TASK.instruction},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
         "function": {"name": "get_order", "arguments": '{"order_id": "W1001"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"status": "pending"}'},
    ]  # fmt: skip
    call = ToolCall("c2", "cancel_order", '{"order_id": "W1001", "reason": "no_longer_needed"}')
    text = rehearsal_user_prompt(
        tools=TOOLS,
        grounding=[],
        history=history,
        acting_turn=AssistantTurn(reasoning="cancel it", tool_calls=(call,)),
        call=call,
    )
    assert is_rehearsal(text)
    assert _imagine(text) == {"order_id": "W1001", "status": "cancelled"}
