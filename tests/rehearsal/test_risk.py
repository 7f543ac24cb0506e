"""Tool risk classes: where a tool's class comes from, and what never reaches an engine."""

from __future__ import annotations

from typing import Any

import pytest

from rehearsal_gateway.rehearsal.errors import BudgetError
from rehearsal_gateway.rehearsal.risk import (
    RiskPolicy,
    RiskSettings,
    ToolRisk,
    classify,
    from_annotations,
    has_annotations,
    risk_map,
    strip_annotations,
    turn_risk,
)
from rehearsal_gateway.rehearsal.testing import answer_turn, multi_call_turn, tool_turn


def tool(name: str, **extra: Any) -> dict[str, Any]:
    """A chat tool entry; ``function_annotations`` go inside the function."""
    function: dict[str, Any] = {"name": name, "parameters": {"type": "object"}}
    if "function_annotations" in extra:
        function["annotations"] = extra.pop("function_annotations")
    return {"type": "function", "function": function, **extra}


@pytest.mark.parametrize(
    ("hints", "expected"),
    [
        pytest.param({"readOnlyHint": True}, "read_only", id="read-only"),
        pytest.param({"readOnlyHint": True, "destructiveHint": True}, "read_only", id="read-wins"),
        pytest.param({"destructiveHint": False}, "write", id="not-destructive"),
        pytest.param({"readOnlyHint": False}, "destructive", id="mcp-default-destructive"),
        pytest.param({"destructiveHint": True}, "destructive", id="destructive"),
        pytest.param({"idempotentHint": True, "title": "x"}, None, id="no-risk-hint"),
    ],
)
def test_mcp_hints_give_a_class(hints: dict[str, Any], expected: str | None) -> None:
    """readOnlyHint, then destructiveHint false; either hint alone defaults as MCP says."""
    assert from_annotations(hints) == expected


def test_the_request_map_then_annotations_then_patterns_then_unknown() -> None:
    """Each source is used only when the ones before it say nothing about the tool."""
    tools = [
        tool("cancel_order", annotations={"destructiveHint": False}),
        tool("get_order", function_annotations={"readOnlyHint": True}),
        tool("delete_user"),
        tool("ping"),
        {"type": "function", "function": {"description": "no name"}},
        "not a tool",
    ]
    settings = RiskSettings(patterns=(("delete_*", "destructive"), ("*", "write")))
    classes = classify(tools, (("cancel_order", "destructive"),), settings)
    assert classes == {
        "cancel_order": ToolRisk("destructive", "request"),
        "get_order": ToolRisk("read_only", "annotations"),
        "delete_user": ToolRisk("destructive", "operator"),
        "ping": ToolRisk("write", "operator"),
    }
    assert classify([tool("ping")])["ping"].to_dict() == {"risk": "unknown", "source": "default"}


def test_a_flat_responses_tool_is_classified_by_its_name() -> None:
    """A tool entry without ``function`` (the Responses shape) carries its name and hints."""
    flat = {"type": "function", "name": "wipe", "annotations": {"destructiveHint": True}}
    assert classify([flat])["wipe"] == ToolRisk("destructive", "annotations")


def test_annotations_are_stripped_and_other_entries_kept_as_they_are() -> None:
    """Both places lose their annotations; an entry without them is the same object."""
    plain = tool("ping")
    tools = [tool("a", annotations={"readOnlyHint": True}),
             tool("b", function_annotations={"destructiveHint": True}), plain, "odd"]  # fmt: skip
    stripped = strip_annotations(tools)
    assert stripped[:2] == (tool("a"), tool("b"))
    assert stripped[2] is plain
    assert stripped[3] == "odd"
    assert "annotations" in tools[0]  # the client's request is not changed


def test_the_request_map_is_validated_naming_the_tool() -> None:
    """Sorted pairs; a wrong class or shape is a BudgetError naming the parameter."""
    assert risk_map({"b": "write", "a": "read_only"}, "rehearsal.risk") == (
        ("a", "read_only"), ("b", "write"),
    )  # fmt: skip
    with pytest.raises(BudgetError) as bad:
        risk_map({"a": "harmless"}, "rehearsal.risk")
    assert bad.value.param == "rehearsal.risk.a"
    with pytest.raises(BudgetError) as shape:
        risk_map(["a"], "rehearsal.risk")
    assert shape.value.param == "rehearsal.risk"


def test_a_turn_is_as_risky_as_its_riskiest_call() -> None:
    """destructive > write > unknown > read_only; an answer has no class."""
    classes = {"get": ToolRisk("read_only", "request"),
               "cancel": ToolRisk("destructive", "request")}  # fmt: skip
    assert turn_risk(multi_call_turn(("get", {}), ("cancel", {})), classes) == "destructive"
    assert turn_risk(multi_call_turn(("get", {}), ("other", {})), classes) == "unknown"
    assert turn_risk(tool_turn("get", {}), classes) == "read_only"
    assert turn_risk(answer_turn("hi"), classes) is None


def test_tenants_have_their_own_settings() -> None:
    """A tenant without settings of its own, or no tenant, gets the gateway's."""
    own = RiskSettings(imagine_reads=False)
    policy = RiskPolicy(RiskSettings(), {"t_a": own})
    assert policy.for_tenant("t_a") is own
    assert policy.for_tenant("t_b") is policy.default
    assert policy.for_tenant(None) is policy.default


def test_has_annotations_looks_at_tool_lists_only() -> None:
    """A list with an annotated tool, in either place; anything else has none."""
    assert has_annotations([tool("a"), tool("b", function_annotations={"readOnlyHint": True})])
    assert not has_annotations([tool("a"), "odd"])
    assert not has_annotations({"annotations": {}})
