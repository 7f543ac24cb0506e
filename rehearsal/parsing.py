"""Lenient readers for what the model writes: hermes tool calls and imagined tool results.

Both readers take any text and never raise. What they cannot read is *classified*, not thrown:
a ``<tool_call>`` block that is not JSON is counted in ``ParsedTurn.malformed``; a rehearsal
answer without a readable result is ``unparsed``. They tolerate surrounding whitespace, code
fences, thinking left in the text (``<think>…</think>``, closed or not) and trailing chatter.

An imagined result is classified as one of (DESIGN §2, docs/formats.md):

- ``veto``     ``{"error_tool_call": {"code": ..., "message": ...}}`` — the simulator predicts the
               call itself is wrong; ``code`` is one of ``VETO_CODES`` (anything else: ``UNKNOWN``);
- ``error``    an object with a top-level ``"error"`` key — a valid call the world refused;
- ``ok``       any other non-empty object, or an array;
- ``unparsed`` everything else (no JSON, an empty object, a bare string or number, ...).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

VETO_CODES: tuple[str, ...] = (
    "INVALID_TOOL_CALL_FORMAT",
    "TOOL_NOT_AVAILABLE",
    "INVALID_PARAMETERS",
)
UNKNOWN_VETO = "UNKNOWN"

Verdict = Literal["ok", "veto", "error", "unparsed"]

_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FENCE = re.compile(r"\A```[\w-]*[ \t]*\n?(.*?)\n?```\Z", re.DOTALL)
_RESULT_OPEN = "<execution_result>"
_RESULT_CLOSE = "</execution_result>"


@dataclass(frozen=True, slots=True)
class ParsedCall:
    """A tool call read from text: its name and its arguments as a JSON value."""

    name: str
    arguments: Any


@dataclass(frozen=True, slots=True)
class ParsedTurn:
    """A raw assistant text split into thinking, visible content and tool calls."""

    content: str | None
    reasoning: str | None
    calls: tuple[ParsedCall, ...]
    malformed: int


@dataclass(frozen=True, slots=True)
class ImaginedResult:
    """How one rehearsal answer was classified; ``result`` is the JSON value, when read."""

    verdict: Verdict
    result: Any = None
    code: str | None = None
    detail: str = ""


def split_thinking(text: str) -> tuple[str | None, str]:
    """(thinking, the rest). An unclosed ``<think>`` swallows everything after it."""
    if "</think>" in text:
        head, _, rest = text.rpartition("</think>")
        thinking = head.split("<think>", 1)[-1].strip()
        return thinking, rest
    if "<think>" in text:
        head, _, thinking = text.partition("<think>")
        return thinking.strip(), head
    return None, text


def strip_fences(text: str) -> str:
    """The text without surrounding whitespace and one enclosing Markdown code fence."""
    text = text.strip()
    match = _FENCE.match(text)
    return match.group(1).strip() if match else text


def _load_json(text: str) -> tuple[bool, Any]:
    """(True, value) for the first JSON value in ``text`` (trailing chatter allowed)."""
    body = strip_fences(text)
    try:
        return True, json.loads(body)
    except (ValueError, RecursionError):
        pass
    starts = [i for i in (body.find("{"), body.find("[")) if i >= 0]
    if not starts:
        return False, None
    try:
        value, _ = json.JSONDecoder().raw_decode(body, min(starts))
    except (ValueError, RecursionError):
        return False, None
    return True, value


def _read_call(block: str) -> ParsedCall | None:
    ok, value = _load_json(block)
    if not ok or not isinstance(value, Mapping):
        return None
    name = value.get("name")
    if not isinstance(name, str) or not name.strip():
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):
        decoded, parsed = _load_json(arguments)
        arguments = parsed if decoded else arguments
    return ParsedCall(name.strip(), arguments)


def parse_turn_text(text: str) -> ParsedTurn:
    """Read hermes ``<tool_call>`` blocks (``arguments`` or ``parameters``) out of raw text."""
    reasoning, rest = split_thinking(text)
    calls: list[ParsedCall] = []
    malformed = 0
    for block in _TOOL_CALL.findall(rest):
        call = _read_call(block)
        if call is None:
            malformed += 1
        else:
            calls.append(call)
    content = _TOOL_CALL.sub("", rest).strip()
    return ParsedTurn(content or None, reasoning, tuple(calls), malformed)


def _result_body(text: str) -> str:
    _, rest = split_thinking(text)
    start = rest.find(_RESULT_OPEN)
    if start < 0:
        return rest
    body = rest[start + len(_RESULT_OPEN) :]
    end = body.find(_RESULT_CLOSE)
    return body if end < 0 else body[:end]


def classify_result(value: Any) -> ImaginedResult:
    """Classify an already-decoded imagined result (see the module docstring)."""
    if isinstance(value, list):
        return ImaginedResult("ok", value)
    if not isinstance(value, dict) or not value:
        return ImaginedResult("unparsed", detail="not a non-empty object or an array")
    if "error_tool_call" in value:
        veto = value["error_tool_call"]
        code = veto.get("code") if isinstance(veto, dict) else None
        known = code if code in VETO_CODES else UNKNOWN_VETO
        return ImaginedResult("veto", value, known)
    if "error" in value:
        return ImaginedResult("error", value)
    return ImaginedResult("ok", value)


def parse_execution_result(text: str | None) -> ImaginedResult:
    """Read a rehearsal-role answer: ``<execution_result>{JSON}</execution_result>``, leniently."""
    if not text or not text.strip():
        return ImaginedResult("unparsed", detail="empty answer")
    ok, value = _load_json(_result_body(text))
    if not ok:
        return ImaginedResult("unparsed", detail="no JSON result found")
    return classify_result(value)
