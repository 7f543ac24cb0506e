"""The lenient readers: hermes tool calls and imagined results, classified and never raised."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from rehearsal_gateway.rehearsal.parsing import (
    PARSE_CLASSES,
    VETO_CODES,
    classify_result,
    parse_execution_result,
    parse_turn_text,
    split_thinking,
    strip_fences,
)

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
NAMES = st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True)


def wrap(value: Any, *, think: str = "<think>\nchecking\n</think>\n\n") -> str:
    return f"{think}<execution_result>\n{json.dumps(value)}\n</execution_result>"


@pytest.mark.parametrize("code", VETO_CODES)
def test_each_envace_veto_code_is_a_veto(code: str) -> None:
    """Each EnvACE veto code is read as a veto carrying that code."""
    got = parse_execution_result(wrap({"error_tool_call": {"code": code, "message": "no"}}))
    assert (got.verdict, got.code) == ("veto", code)


@pytest.mark.parametrize(
    ("text", "verdict", "code"),
    [
        pytest.param(wrap({"status": "pending"}), "ok", None, id="object"),
        pytest.param(wrap([1, 2]), "ok", None, id="array"),
        pytest.param(wrap([]), "ok", None, id="empty-array"),
        pytest.param(wrap({"error": "order not found"}), "error", None, id="tool-error"),
        pytest.param(wrap({"error_tool_call": {"code": "NOPE"}}), "veto", "UNKNOWN", id="odd-code"),
        pytest.param(wrap({"error_tool_call": "bad"}), "unparsed", None, id="veto-not-object"),
        pytest.param(wrap({}), "unparsed", None, id="empty-object"),
        pytest.param(wrap("just text"), "unparsed", None, id="bare-string"),
        pytest.param(wrap(3), "unparsed", None, id="bare-number"),
        pytest.param("", "unparsed", None, id="empty"),
        pytest.param("   \n", "unparsed", None, id="blank"),
        pytest.param(None, "unparsed", None, id="none"),
        pytest.param('<think>never closed {"a": 1}', "unparsed", None, id="unclosed-think"),
        pytest.param(
            "<execution_result>\n{not json}\n</execution_result>",
            "unparsed",
            None,
            id="broken-json",
        ),
        pytest.param("no result at all", "unparsed", None, id="prose"),
        pytest.param(
            '<execution_result>\n```json\n{"a": 1}\n```\n</execution_result>',
            "ok",
            None,
            id="fenced",
        ),
        pytest.param('<execution_result>{"a": 1}', "unparsed", None, id="unclosed-tag"),
        pytest.param('{"a": 1} and some chatter', "unparsed", None, id="no-tag-trailing-text"),
        pytest.param("result: [1] {", "unparsed", None, id="array-before-brace"),
        pytest.param(
            '<execution_result>\n{"a": [1, }\n</execution_result>',
            "unparsed",
            None,
            id="broken-after-start",
        ),
        pytest.param("[" * 100_000, "unparsed", None, id="too-deep"),
    ],
)
def test_classification_table(text: str | None, verdict: str, code: str | None) -> None:
    """Each well-formed and malformed rehearsal answer gets its documented classification."""
    got = parse_execution_result(text)
    assert (got.verdict, got.code) == (verdict, code)


def test_unparsed_answers_say_why() -> None:
    """An unparsed answer carries a short reason for the trace."""
    assert parse_execution_result("nothing").detail == "no <execution_result> block"
    assert classify_result({}).detail == "not a non-empty object or an array"


@given(st.text())
def test_execution_result_never_raises(text: str) -> None:
    """Any text is classified; nothing raises."""
    assert parse_execution_result(text).verdict in ("ok", "veto", "error", "unparsed")


TAGS = ("<think>", "</think>", "<execution_result>", "</execution_result>")


@given(JSON_VALUES, st.sampled_from(["", "<think>x</think>", "<think>\n</think>\n\n"]))
def test_wrapped_json_is_classified_like_the_value(value: Any, think: str) -> None:
    """A wrapped JSON value (with no tags in its strings) is classified as the value itself."""
    assume(not any(tag in json.dumps(value) for tag in TAGS))
    got = parse_execution_result(wrap(value, think=think))
    assert got == classify_result(value)


CALL = {"order_id": "W1"}


@pytest.mark.parametrize(
    ("text", "truncated", "parse"),
    [
        pytest.param(wrap({"status": "ok"}), False, "ok", id="ok"),
        pytest.param(
            '<execution_result>\n```json\n{"a": 1}\n```\n</execution_result>', False, "ok",
            id="ok-fenced",
        ),
        pytest.param("  ", False, "empty", id="empty"),
        pytest.param("<think>\nthe tool would return\n</think>\n", False, "thinking_only",
                     id="thinking-only"),
        pytest.param("<think>\nstill thinking when", False, "thinking_only", id="think-unclosed"),
        pytest.param("<think>\nstill thinking when", True, "truncated", id="cut-in-thinking"),
        pytest.param('<execution_result>\n{"a": ', True, "truncated", id="cut-in-block"),
        pytest.param("The result is", True, "truncated", id="cut-before-block"),
        pytest.param('{"status": "ok"}', False, "no_block", id="bare-json"),
        pytest.param('```json\n{"status": "ok"}\n```', False, "no_block", id="fenced-bare-json"),
        pytest.param("The order was cancelled.", False, "no_block", id="prose"),
        pytest.param('<execution_result>\n{"a": 1}\n', False, "unclosed", id="unclosed"),
        pytest.param("<execution_result>\nall good\n</execution_result>", False, "not_json",
                     id="not-json"),
        pytest.param(wrap("done"), False, "not_object", id="string"),
        pytest.param(wrap(None), False, "not_object", id="null"),
        pytest.param(wrap({}), False, "not_object", id="empty-object"),
        pytest.param(wrap(CALL), False, "echo", id="echo-arguments"),
        pytest.param(wrap({"name": "get_order", "arguments": CALL}), False, "echo", id="echo-call"),
        pytest.param(wrap({"a": 1}) + "\n" + wrap({"b": 2}, think=""), False, "multiple_blocks",
                     id="two-blocks"),
        pytest.param("Here it is: " + wrap({"a": 1}, think=""), False, "prose_around",
                     id="prose-before"),
        pytest.param(wrap({"a": 1}) + "\nHope this helps.", False, "prose_around",
                     id="prose-after"),
        pytest.param('<execution_result>\nresult: {"a": 1}\n</execution_result>', False,
                     "prose_around", id="prose-inside"),
        pytest.param("Sorry, I cannot simulate this tool.", False, "refusal", id="refusal-prose"),
        pytest.param(wrap({"error_tool_call": "no"}), False, "refusal", id="refusal-odd-veto"),
    ],
)  # fmt: skip
def test_parse_classes(text: str, truncated: bool, parse: str) -> None:
    """Each way a real answer can miss the format has its own class and is never evidence."""
    got = parse_execution_result(
        text, truncated=truncated, call_name="get_order", call_arguments=CALL
    )
    assert got.parse == parse
    assert parse in PARSE_CLASSES
    assert (got.verdict == "unparsed") == (parse != "ok")
    if parse != "ok":
        assert (got.result, got.code) == (None, None)


def test_a_complete_block_is_read_even_when_cut_after_it() -> None:
    """A block closed before the token limit struck is evidence; cut text after it is not."""
    assert parse_execution_result(wrap({"a": 1}), truncated=True).parse == "ok"
    cut = wrap({"a": 1}) + "\nNow"
    assert parse_execution_result(cut, truncated=True).parse == "prose_around"


def test_echo_needs_the_call() -> None:
    """Without the call, a result that looks like arguments is read as a result."""
    assert parse_execution_result(wrap(CALL)).parse == "ok"
    assert parse_execution_result(wrap({"x": 1}), call_name="f", call_arguments={}).parse == "ok"


@given(st.text())
def test_turn_parser_never_raises(text: str) -> None:
    """Any text splits into thinking, content and calls; nothing raises."""
    parsed = parse_turn_text(text)
    assert parsed.malformed >= 0


@given(st.lists(st.tuples(NAMES, st.dictionaries(NAMES, JSON_SCALARS, max_size=3)), max_size=3))
def test_hermes_blocks_round_trip(calls: list[tuple[str, dict[str, Any]]]) -> None:
    """Tool calls written as hermes blocks are read back with their names and arguments."""
    text = "<think>\nplan\n</think>\n\nSure." + "".join(
        f"\n<tool_call>\n{json.dumps({'name': n, 'arguments': a})}\n</tool_call>" for n, a in calls
    )
    parsed = parse_turn_text(text)
    assert [(c.name, c.arguments) for c in parsed.calls] == calls
    assert (parsed.reasoning, parsed.content, parsed.malformed) == ("plan", "Sure.", 0)


@pytest.mark.parametrize(
    ("text", "calls", "malformed"),
    [
        pytest.param(
            '<tool_call>{"name": "f", "parameters": {"a": 1}}</tool_call>',
            [("f", {"a": 1})],
            0,
            id="parameters-key",
        ),
        pytest.param(
            '<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>',
            [("f", {"a": 1})],
            0,
            id="arguments-as-string",
        ),
        pytest.param(
            '<tool_call>{"name": "f", "arguments": "not json"}</tool_call>',
            [("f", "not json")],
            0,
            id="arguments-bad-string",
        ),
        pytest.param('<tool_call>{"name": " f "}</tool_call>', [("f", {})], 0, id="no-arguments"),
        pytest.param(
            '<tool_call>```json\n{"name": "f"}\n```</tool_call>', [("f", {})], 0, id="fenced"
        ),
        pytest.param('<tool_call>{"name": "f"}', [("f", {})], 0, id="unclosed"),
        pytest.param("<tool_call>not json</tool_call>", [], 1, id="not-json"),
        pytest.param('<tool_call>["f"]</tool_call>', [], 1, id="not-object"),
        pytest.param('<tool_call>{"name": ""}</tool_call>', [], 1, id="empty-name"),
        pytest.param('<tool_call>{"name": 3}</tool_call>', [], 1, id="name-not-string"),
    ],
)
def test_hermes_table(text: str, calls: list[tuple[str, Any]], malformed: int) -> None:
    """Hermes variants and malformed blocks are read or counted as documented."""
    parsed = parse_turn_text(text)
    assert [(c.name, c.arguments) for c in parsed.calls] == calls
    assert parsed.malformed == malformed


def test_thinking_and_fences_helpers() -> None:
    """Thinking splits on the last close tag; an unclosed one swallows the rest; fences go."""
    assert split_thinking("<think>a</think>b</think>c") == ("a</think>b", "c")
    assert split_thinking("x<think>y") == ("y", "x")
    assert split_thinking("plain") == (None, "plain")
    assert strip_fences("  ```\n[1]\n```  ") == "[1]"
