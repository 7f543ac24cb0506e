"""The rehearsal role: section parsing, vetoes, world replay and fidelity."""

from __future__ import annotations

import json
import random

import pytest

from rehearsal_gateway.twin.simulator import (
    MalformedRehearsal,
    Simulator,
    grounded_fidelity,
    is_rehearsal,
    parse_prompt,
)
from rehearsal_gateway.twin.worlds import WORLD_NAMES, load_world
from tests.twin.conftest import rehearsal_text

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
    from rehearsal_gateway.rehearsal.messages import AssistantTurn, ToolCall
    from rehearsal_gateway.rehearsal.prompts import rehearsal_user_prompt

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


# The rates below are counted over many seeds; the bounds are wide binomial ones (about five
# standard deviations), so they pin the rule without being flaky.
SEEDS = range(400)
CANCEL = {"order_id": "W1001", "reason": "no_longer_needed"}
CANCEL_WRONG_ENUM = {"order_id": "W1001", "reason": "No Longer Needed"}
CANCEL_UNDECLARED = {**CANCEL, "notify": True}


def _rate(text: str, fidelity: float, hit) -> float:
    simulator = Simulator(WORLDS, fidelity)
    prompt = parse_prompt(text)
    return sum(bool(hit(simulator.imagine(prompt, random.Random(s))[1])) for s in SEEDS) / len(
        SEEDS
    )


def _vetoed(result: object) -> bool:
    return isinstance(result, dict) and "error_tool_call" in result


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param({"order_id": "W1001"}, id="missing"),
        pytest.param(CANCEL_WRONG_ENUM, id="wrong-enum"),
        pytest.param(CANCEL_UNDECLARED, id="undeclared"),
    ],
)
@pytest.mark.parametrize(
    ("fidelity", "low", "high"), [(1.0, 1.0, 1.0), (0.5, 0.37, 0.63), (0.0, 0, 0)]
)
def test_schema_vetoes_drift_with_fidelity(arguments, fidelity, low, high) -> None:
    """A schema-invalid call is vetoed with probability ``fidelity``, not with certainty."""
    text = rehearsal_text(TOOLS, HISTORY_READ, "cancel_order", arguments)
    assert low <= _rate(text, fidelity, _vetoed) <= high


def test_missed_violation_imagines_the_tool_running() -> None:
    """A drifted imagination runs the tool on the bad arguments, or imagines a generic success."""
    wrong_enum = rehearsal_text(TOOLS, HISTORY_READ, "cancel_order", CANCEL_WRONG_ENUM)
    assert _imagine(wrong_enum, fidelity=0.0) == {"order_id": "W1001", "status": "cancelled"}
    # The handler needs the missing key, so the imagination makes up a plausible success.
    missing = rehearsal_text(TOOLS, HISTORY_READ, "cancel_order", {"order_id": "W1001"})
    result = _imagine(missing, fidelity=0.0)
    assert result["status"] == "ok"
    assert result["request"] == {"order_id": "W1001"}
    # The world's own refusal stands: this write comes before its read.
    unread = rehearsal_text(TOOLS, f"User: {TASK.instruction}", "cancel_order", CANCEL_WRONG_ENUM)
    assert "before" in _imagine(unread, fidelity=0.0)["error"]
    unknown = rehearsal_text(TOOLS, HISTORY_READ, "drop_table", {}, schema={})
    assert _imagine(unknown, fidelity=0.0)["status"] == "ok"


def test_undeclared_arguments_are_vetoed_like_other_violations() -> None:
    """A faithful imagination vetoes an argument the schema does not declare."""
    text = rehearsal_text(TOOLS, HISTORY_READ, "cancel_order", CANCEL_UNDECLARED)
    veto = _imagine(text)["error_tool_call"]
    assert veto["code"] == "INVALID_PARAMETERS"
    assert "unexpected argument 'notify'" in veto["message"]


def test_few_shot_section_is_parsed() -> None:
    """Few-shot pairs are read as name, arguments and result; ``<unavailable>`` means none."""
    examples = [
        ("get_order", {"order_id": "W1002"}, {"order_id": "W1002", "status": "pending"}),
        ("get_user", {"user_id": "U1001"}, {"error": "user U1001 not found"}),
    ]
    prompt = parse_prompt(
        rehearsal_text(TOOLS, HISTORY_READ, "get_order", {"order_id": "W1001"}, examples=examples)
    )
    assert [(e.name, e.arguments, e.result) for e in prompt.examples] == examples
    plain = rehearsal_text(TOOLS, HISTORY_READ, "get_order", {"order_id": "W1001"})
    assert parse_prompt(plain).examples == ()


def test_core_few_shot_section_is_parsed() -> None:
    """The gateway core's prompt with grounding (docs/formats.md) reads back pair by pair."""
    from rehearsal_gateway.rehearsal.messages import AssistantTurn, ToolCall
    from rehearsal_gateway.rehearsal.prompts import GroundingObservation, rehearsal_user_prompt

    seen = [
        GroundingObservation("get_order", {"order_id": "W1002"}, {"status": "pending"}),
        GroundingObservation("get_order", {"order_id": "W1003"}, '{"status": "delivered"}'),
    ]
    call = ToolCall("c1", "get_order", '{"order_id": "W1001"}')
    text = rehearsal_user_prompt(
        tools=TOOLS,
        grounding=seen,
        history=[{"role": "user", "content": TASK.instruction}],
        acting_turn=AssistantTurn(reasoning="look it up", tool_calls=(call,)),
        call=call,
    )
    prompt = parse_prompt(text)
    assert [(e.name, e.arguments, e.result) for e in prompt.examples] == [
        ("get_order", {"order_id": "W1002"}, {"status": "pending"}),
        ("get_order", {"order_id": "W1003"}, {"status": "delivered"}),
    ]
    assert prompt.first_user == TASK.instruction


@pytest.mark.parametrize(
    ("fidelity", "k", "expected"),
    [(0.0, 0, 0.0), (0.0, 1, 0.5), (0.0, 2, 0.75), (0.5, 1, 0.75), (0.8, 3, 0.975), (1.0, 4, 1.0)],
)
def test_grounded_fidelity_rule(fidelity: float, k: int, expected: float) -> None:
    """k real examples of the tool: 1 - (1 - f) * 0.5**k by default."""
    assert grounded_fidelity(fidelity, k) == pytest.approx(expected)
    assert grounded_fidelity(fidelity, k, gain=1.0) == pytest.approx(fidelity)
    assert grounded_fidelity(0.0, 2, gain=0.8) == pytest.approx(0.36)


def _truthful(truth):
    return lambda result: result == truth


@pytest.mark.parametrize(
    ("k", "low", "high"),
    [pytest.param(0, 0.0, 0.0, id="none"), pytest.param(1, 0.37, 0.63, id="one"),
     pytest.param(2, 0.64, 0.86, id="two")],
)  # fmt: skip
def test_grounding_raises_fidelity_for_that_tool(k: int, low: float, high: float) -> None:
    """At fidelity 0, k real results of the same tool make the imagination right 1 - 0.5**k."""
    others = [
        ("get_order", {"order_id": f"W100{i}"}, {"order_id": f"W100{i}", "status": "pending"})
        for i in (2, 3)
    ][:k]
    other_tool = [("get_user", {"user_id": "U1001"}, {"user_id": "U1001"})]
    text = rehearsal_text(
        TOOLS, f"User: {TASK.instruction}", "get_order", {"order_id": "W1001"},
        examples=[*other_tool, *others],
    )  # fmt: skip
    truth = _imagine(text, fidelity=1.0)
    assert truth["status"] == "pending"
    assert low <= _rate(text, 0.0, _truthful(truth)) <= high


def test_exact_example_is_usually_reproduced() -> None:
    """With a real result for exactly these arguments, a drifting imagination mostly copies it."""
    real = {"order_id": "W1001", "status": "cancelled", "note": "from an earlier session"}
    text = rehearsal_text(
        TOOLS, f"User: {TASK.instruction}", "get_order", {"order_id": "W1001"},
        examples=[("get_order", {"order_id": "W1001"}, real)],
    )  # fmt: skip
    # Fidelity 0, one example: right half the time; otherwise it copies the example 3 times in 4.
    copied = _rate(text, 0.0, _truthful(real))
    assert 0.30 <= copied <= 0.45
    truth = _imagine(text, fidelity=1.0)
    assert truth != real  # a faithful imagination predicts today's state, not the stale copy
    assert 0.37 <= _rate(text, 0.0, _truthful(truth)) <= 0.63


def test_exact_example_of_a_real_error_is_reproduced_for_an_invalid_call() -> None:
    """A schema-invalid call shown with its real error: a drift mostly imagines that error."""
    real = {"error": "missing required argument 'reason'"}
    text = rehearsal_text(
        TOOLS, HISTORY_READ, "cancel_order", {"order_id": "W1001"},
        examples=[("cancel_order", {"order_id": "W1001"}, real)],
    )  # fmt: skip
    failed = _rate(text, 0.0, lambda r: _vetoed(r) or r == real)
    assert 0.80 <= failed <= 0.95  # 0.5 vetoed + 0.5 * 0.75 copied = 0.875


def test_drift_on_a_valid_call_sometimes_vetoes_it() -> None:
    """At fidelity 0 a valid call is refused a third of the time (a false veto), never at 1."""
    text = rehearsal_text(TOOLS, HISTORY_READ, "cancel_order", CANCEL)
    assert 0.25 <= _rate(text, 0.0, _vetoed) <= 0.42
    assert _rate(text, 1.0, _vetoed) == 0.0
    veto = next(
        r
        for s in SEEDS
        if _vetoed(r := Simulator(WORLDS, 0.0).imagine(parse_prompt(text), random.Random(s))[1])
    )
    assert veto["error_tool_call"]["code"] == "INVALID_PARAMETERS"
    assert veto["error_tool_call"]["message"].split()[0] in CANCEL


def test_gain_one_leaves_only_exact_copies() -> None:
    """With --grounding-gain 1 other examples change nothing; an exact one is still copied."""
    others = [("get_order", {"order_id": "W1002"}, {"order_id": "W1002", "status": "pending"})]
    text = rehearsal_text(
        TOOLS, f"User: {TASK.instruction}", "get_order", {"order_id": "W1001"}, examples=others
    )
    truth = Simulator(WORLDS, 1.0).imagine(parse_prompt(text), random.Random(0))[1]
    flat = Simulator(WORLDS, 0.0, grounding_gain=1.0)
    prompt = parse_prompt(text)
    assert all(flat.imagine(prompt, random.Random(s))[1] != truth for s in SEEDS)
    exact = [*others, ("get_order", {"order_id": "W1001"}, truth)]
    prompt = parse_prompt(
        rehearsal_text(
            TOOLS, f"User: {TASK.instruction}", "get_order", {"order_id": "W1001"}, examples=exact
        )
    )
    copied = sum(flat.imagine(prompt, random.Random(s))[1] == truth for s in SEEDS) / len(SEEDS)
    assert 0.65 <= copied <= 0.85  # COPY_EXACT of the drifts, and every call drifts
