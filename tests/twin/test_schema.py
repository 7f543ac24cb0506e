"""Validation of tool calls: undeclared arguments fail where the schema declares its arguments."""

from __future__ import annotations

from typing import Any

import pytest

from rehearsal_gateway.twin.schema import validate_call
from rehearsal_gateway.twin.worlds import load_world

DECLARED = {
    "type": "object",
    "properties": {"id": {"type": "string"}, "address": {"type": "object", "properties": {}}},
    "required": ["id"],
}


@pytest.mark.parametrize(
    ("schema", "arguments", "problem"),
    [
        pytest.param(DECLARED, {"id": "a"}, None, id="declared"),
        pytest.param(DECLARED, {"id": "a", "x": 1}, "unexpected argument 'x'", id="undeclared"),
        pytest.param(
            DECLARED, {"id": "a", "address": {"zip": "1"}}, "unexpected argument 'zip' in address",
            id="nested-undeclared",
        ),
        pytest.param(
            {**DECLARED, "additionalProperties": True}, {"id": "a", "x": 1}, None, id="allowed"
        ),
        pytest.param(
            {**DECLARED, "additionalProperties": {"type": "integer"}}, {"id": "a", "x": "1"},
            "x must be of type integer, got str", id="extra-schema",
        ),
        pytest.param({"type": "object"}, {"x": 1}, None, id="no-properties"),
        pytest.param({"type": "object", "properties": [1]}, {"x": 1}, None, id="odd-properties"),
    ],
)  # fmt: skip
def test_undeclared_arguments(schema: dict[str, Any], arguments: Any, problem: str | None) -> None:
    """An argument the schema does not list is refused unless additionalProperties allows it."""
    violation = validate_call("t", arguments, {"t": schema})
    if problem is None:
        assert violation is None
    else:
        assert violation is not None
        assert violation.code == "INVALID_PARAMETERS"
        assert violation.message == problem


def test_real_tool_refuses_an_undeclared_argument() -> None:
    """A world tool called with an extra argument fails for real and changes nothing."""
    world = load_world("retail")
    state = world.new_state()
    world.call(state, "get_order", {"order_id": "W1001"})
    before = repr(state)
    arguments = {"order_id": "W1001", "reason": "no_longer_needed", "refund_to": "card"}
    result = world.call(state, "cancel_order", arguments)
    assert result == {"error": "unexpected argument 'refund_to'"}
    assert repr(state) == before
