"""Deterministic schema checks of tool calls: what they veto, what they let through, and why."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any

import pytest

from rehearsal_gateway.rehearsal.checks import ToolChecker
from rehearsal_gateway.rehearsal.messages import AssistantTurn, ToolCall
from rehearsal_gateway.rehearsal.testing import multi_call_turn, tool_turn
from tests.rehearsal.conftest import TOOLS


def call(name: str, arguments: Any) -> ToolCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall("c1", name, text)


def tool(parameters: Any, *, strict: bool | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {"name": "t", "parameters": parameters}
    if strict is not None:
        function["strict"] = strict
    return {"type": "function", "function": function}


OBJECT = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


@pytest.mark.parametrize(
    ("name", "arguments", "status", "message"),
    [
        pytest.param("get_order", {"order_id": "#1"}, "ok", "", id="valid"),
        pytest.param("refund_all", {}, "invalid", "not among the request's tools", id="unknown"),
        pytest.param("get_order", "[1, 2]", "invalid", "must be a JSON object", id="not-object"),
        pytest.param("get_order", "{oops", "invalid", "must be a JSON object", id="not-json"),
        pytest.param("get_order", {}, "invalid", "'order_id' is a required property", id="missing"),
        pytest.param(
            "get_order", {"order_id": 7}, "invalid", "arguments.order_id: 7 is not of type",
            id="type",
        ),
        pytest.param(
            "cancel_order", {"order_id": "#1", "reason": "whim"}, "invalid",
            "arguments.reason: 'whim' is not one of", id="enum",
        ),
        pytest.param(
            "get_order", {"order_id": "#1", "verbose": True}, "invalid",
            "Additional properties are not allowed ('verbose' was unexpected)", id="undeclared",
        ),
    ],
)  # fmt: skip
def test_calls_against_the_request_tools(
    name: str, arguments: Any, status: str, message: str
) -> None:
    """Unknown tools, non-objects, missing, mistyped, out-of-enum and undeclared arguments."""
    verdict = ToolChecker(TOOLS).check_call(call(name, arguments))
    assert verdict.status == status
    assert message in verdict.message


def test_undeclared_arguments_follow_the_schema_when_asked() -> None:
    """With reject_undeclared off, only an explicit additionalProperties or strict refuses them."""
    extra = call("t", {"a": 1, "b": 2})
    assert ToolChecker([tool(OBJECT)], reject_undeclared=False).check_call(extra).status == "ok"
    strict = ToolChecker([tool(OBJECT, strict=True)], reject_undeclared=False)
    assert strict.check_call(extra).invalid
    allowed = ToolChecker([tool({**OBJECT, "additionalProperties": True})])
    assert allowed.check_call(extra).status == "ok"
    loose = ToolChecker([tool({"type": "object"})])  # no properties listed: nothing is undeclared
    assert loose.check_call(extra).status == "ok"


def test_nested_and_referenced_schemas_are_checked() -> None:
    """Errors inside arrays and $ref'd definitions are found and located."""
    schema = {
        "type": "object",
        "$defs": {"item": {"type": "object", "properties": {"n": {"type": "integer"}}}},
        "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/item"}}},
    }
    verdict = ToolChecker([tool(schema)]).check_call(call("t", {"items": [{"n": 1}, {"n": "x"}]}))
    assert verdict.invalid
    assert verdict.message.startswith("arguments.items[1].n:")


@pytest.mark.parametrize(
    "parameters",
    [
        pytest.param(
            {"type": "object", "properties": {"a": {"type": "no-such-type"}}}, id="bad-type"
        ),
        pytest.param({"type": "object", "required": "a"}, id="bad-required"),
    ],
)
def test_unusable_schemas_are_unchecked_never_vetoed(parameters: dict[str, Any]) -> None:
    """A schema the validator cannot read decides nothing: the call is unchecked."""
    verdict = ToolChecker([tool(parameters)]).check_call(call("t", {"a": 1}))
    assert verdict.status == "unchecked"
    assert not verdict.invalid


def test_a_tool_without_parameters_takes_an_empty_object() -> None:
    """Parameters absent or not an object: any argument object passes (nothing to check)."""
    checker = ToolChecker([{"type": "function", "function": {"name": "ping"}}, {"junk": 1}])
    assert checker.check_call(call("ping", {})).status == "ok"


def test_a_turn_reports_its_first_failing_call() -> None:
    """Turns: the first invalid call wins; else unchecked if any call was; an answer is ok."""
    checker = ToolChecker([*TOOLS, tool({"type": "object", "required": "a"})])
    bad = multi_call_turn(("get_order", {"order_id": "#1"}), ("get_order", {}))
    assert "required" in checker.check_turn(bad).message
    odd = multi_call_turn(("get_order", {"order_id": "#1"}), ("t", {}))
    assert checker.check_turn(odd).status == "unchecked"
    assert checker.check_turn(tool_turn("get_order", {"order_id": "#1"})).status == "ok"
    assert checker.check_turn(AssistantTurn(content="done")).status == "ok"


def test_where_the_fast_validator_refuses_the_reference_decides() -> None:
    """NaN is a ``number`` to ``jsonschema`` and not to ``jsonschema-rs``: ok, not a veto."""
    parameters = {"type": "object", "properties": {"x": {"type": "number"}}}
    checker = ToolChecker([tool(parameters)])
    assert checker.check_call(call("t", '{"x": NaN}')).status == "ok"
    assert checker.check_call(call("t", '{"x": "1"}')).message == (
        "arguments.x: '1' is not of type 'number'"
    )


def test_a_pattern_is_matched_by_pythons_regular_expressions() -> None:
    """``\\d`` takes any Unicode digit in Python's ``re`` (ASCII only in ECMA-262): no fast path."""
    parameters = {"type": "object", "properties": {"code": {"type": "string", "pattern": r"^\d+$"}}}
    checker = ToolChecker([tool(parameters)])
    assert checker.check_call(call("t", {"code": "\u0663\u0664"})).status == "ok"  # Arabic-Indic
    assert checker.check_call(call("t", {"code": "x1"})).invalid


def test_a_remote_ref_in_a_schema_is_never_fetched() -> None:
    """A client's schema naming a URL must not make the gateway fetch it (no request is sent)."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            body = b'{"type": "integer"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/n.json"
        parameters = {"type": "object", "properties": {"n": {"$ref": url}}}
        verdict = ToolChecker([tool(parameters)]).check_call(call("t", {"n": "seven"}))
    finally:
        server.shutdown()
        server.server_close()
    assert seen == []
    assert verdict.status == "unchecked"  # it could not decide: never a veto
