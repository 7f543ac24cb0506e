"""The rehearsal-role prompt is EnvACE's trained format, byte for byte (golden file)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rehearsal_gateway.rehearsal.errors import PromptError
from rehearsal_gateway.rehearsal.messages import AssistantTurn, ToolCall
from rehearsal_gateway.rehearsal.prompts import (
    DEFAULT_SYSTEM_INSTRUCTION,
    GroundingObservation,
    ToolsText,
    _dump,
    _dump_repeated,
    few_shot_section,
    flatten_history,
    load_system_instruction,
    rehearsal_messages,
    rehearsal_user_prompt,
    tool_schema,
)
from tests.rehearsal.conftest import TOOLS

GOLDEN = Path(__file__).parent / "golden" / "rehearsal_prompt.txt"

HISTORY: tuple[dict[str, Any], ...] = (
    {"role": "system", "content": "You are a retail support agent."},
    {"role": "user", "content": "  Cancel #W1001 please.  "},
    {
        "role": "assistant",
        "content": "Let me look at the order first.",
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "get_order", "arguments": '{"order_id": "#W1001"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_a", "content": '{"status": "pending"}'},
    {"role": "user", "content": [{"type": "text", "text": "It's fine, no longer needed."}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_b", "function": {"name": "get_user", "arguments": {"id": "u1"}}}
        ],
    },
    {"role": "tool", "name": "get_user", "content": '{"name": "Ana"}'},
    {"role": "assistant", "content": ""},
    {"role": "user", "content": ""},
)

ACTING_TURN = AssistantTurn(
    content="",
    reasoning="The user confirmed; cancel with the allowed reason.",
    tool_calls=(
        ToolCall("t1", "cancel_order", '{"order_id": "#W1001", "reason": "no longer needed"}'),
        ToolCall("t2", "notify", '{"text": "Ünïcode"}'),
    ),
)

GROUNDING = (
    GroundingObservation(
        "cancel_order",
        {"order_id": "#W0007", "reason": "ordered by mistake"},
        {"status": "cancelled", "refund": 12.5},
    ),
    GroundingObservation("cancel_order", {"order_id": "#W0008"}, "Error: reason is required"),
)


def build() -> str:
    return rehearsal_user_prompt(
        tools=TOOLS,
        grounding=GROUNDING,
        history=HISTORY,
        acting_turn=ACTING_TURN,
        call=ACTING_TURN.tool_calls[0],
    )


def test_prompt_matches_the_golden_file() -> None:
    """All six sections, in order, byte for byte, for a conversation with tool calls and results."""
    assert build() == GOLDEN.read_text(encoding="utf-8")


def test_prompt_shape_invariants() -> None:
    """Sections are in the trained order, it starts with the whitelist label, ends in /think."""
    prompt = build()
    labels = [
        "Candidate tools (whitelist for this sample):\n",
        "\n\nPrevious tool calls and results (few-shot):\n",
        "\n\nCurrent conversation history:\n",
        "\n\nRL model's latest response:\n",
        "\n\nCurrent tool to simulate:\n- name: cancel_order\n",
    ]
    positions = [prompt.index(label) for label in labels]
    assert positions == sorted(positions)
    assert prompt.startswith(labels[0])
    assert prompt.endswith("\n\n/think")
    assert "You are a retail support agent." not in prompt


def test_few_shot_is_unavailable_without_grounding() -> None:
    """No grounding gives the single-line ``<unavailable>`` form."""
    assert few_shot_section([]) == "Previous tool calls and results (few-shot): <unavailable>"


def test_empty_history_is_named() -> None:
    """A history with nothing to show says so, as in training."""
    assert flatten_history([{"role": "system", "content": "x"}]) == "No conversation history"


def test_history_handles_odd_messages() -> None:
    """Unknown roles, non-text parts and nameless unmatched tool results flatten safely."""
    messages = [
        {"role": "developer", "content": "ignored"},
        {"role": "user", "content": [{"type": "image_url"}, "x", {"type": "text", "text": "hi"}]},
        {"role": "user", "content": 3},
        {"role": "assistant", "content": "ok", "tool_calls": "garbage"},
        {"role": "assistant", "tool_calls": [{"function": "odd"}, "odd"]},
        {"role": "tool", "tool_call_id": "unknown", "content": "done"},
    ]
    assert flatten_history(messages) == (
        "User: hi\n\nAssistant: ok\n\n"
        'Assistant: \n<tool_call>\n{"name": "", "arguments": }\n</tool_call>'
        '\n<tool_call>\n{"name": "", "arguments": }\n</tool_call>\n\nTool: done'
    )


def test_tool_schema_lookup() -> None:
    """The schema comes from the OpenAI or bare form; an unknown tool has an empty schema."""
    bare = [{"name": "f", "parameters": {"type": "object"}}, {"name": "g"}]
    assert tool_schema(bare, "f") == {"type": "object"}
    assert tool_schema(bare, "g") == {}
    assert tool_schema(TOOLS, "nope") == {}


def test_grounding_observations_read_leniently() -> None:
    """Stored observations round-trip; anything else reads as None."""
    seen = GROUNDING[0]
    assert GroundingObservation.from_dict(seen.to_dict()) == seen
    for bad in (None, [], {"name": 1}, {"name": "f", "arguments": {}}, {"name": "f", "result": 1}):
        assert GroundingObservation.from_dict(bad) is None


def test_system_instruction_is_ours_and_overridable(tmp_path: Path) -> None:
    """The default names every veto code and the output tags; a file replaces it byte for byte."""
    for needle in (
        "INVALID_TOOL_CALL_FORMAT",
        "TOOL_NOT_AVAILABLE",
        "INVALID_PARAMETERS",
        "<execution_result>",
        "error_tool_call",
    ):
        assert needle in DEFAULT_SYSTEM_INSTRUCTION
    path = tmp_path / "system.txt"
    path.write_text("Upstream prompt.\n", encoding="utf-8")
    assert load_system_instruction(path) == "Upstream prompt.\n"
    system, user = rehearsal_messages("S", "U")
    assert (system, user) == ({"role": "system", "content": "S"}, {"role": "user", "content": "U"})


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(None, id="missing"),
        pytest.param(" \n", id="blank"),
        pytest.param(b"\xff\xfe", id="not-utf8"),
    ],
)
def test_bad_system_instruction_files_raise(tmp_path: Path, content: bytes | str | None) -> None:
    """A missing, blank or undecodable file raises PromptError."""
    path = tmp_path / "system.txt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(PromptError):
        load_system_instruction(path)


@pytest.mark.parametrize(
    "value",
    [
        TOOLS,
        [],
        {},
        [[], {}, [[1, 2.5e-7, -0.0]], {"a": {}}],
        {"é": 'naïve \u2603 "quoted" \\ back', 1: True, "n": None, "big": 2**70},
        float("nan"),
        "plain",
    ],
)
def test_repeated_dump_is_the_indented_dump(value: Any) -> None:
    # The cached form of what every rehearsal repeats must be the trained bytes exactly.
    assert _dump_repeated(value) == _dump(value)
    assert _dump_repeated(value) == _dump(value)  # and again, from the cache


def test_shared_tools_text_writes_the_same_prompts() -> None:
    """Prompts built from one ``ToolsText`` equal those from the tool list, for each call."""
    shared = ToolsText(TOOLS)
    for call in ACTING_TURN.tool_calls:
        kwargs: dict[str, Any] = {
            "grounding": GROUNDING,
            "history": HISTORY,
            "acting_turn": ACTING_TURN,
            "call": call,
        }
        alone = rehearsal_user_prompt(tools=TOOLS, **kwargs)
        assert rehearsal_user_prompt(tools=shared, **kwargs) == alone
