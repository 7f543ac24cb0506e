"""Lenient readers for what the model writes: hermes tool calls and imagined tool results.

Both readers take any text and never raise. What they cannot read is *classified*, not thrown:
a ``<tool_call>`` block that is not JSON is counted in ``ParsedTurn.malformed``; a rehearsal
answer that misses the format is ``unparsed`` with a ``parse`` class saying how.

An imagined result's ``verdict`` is one of (DESIGN §2, docs/formats.md):

- ``veto``     ``{"error_tool_call": {"code": ..., "message": ...}}`` — the simulator predicts the
               call itself is wrong; ``code`` is one of ``VETO_CODES`` (anything else: ``UNKNOWN``);
- ``error``    an object with a top-level ``"error"`` key — a valid call the world refused;
- ``ok``       any other non-empty object, or an array;
- ``unparsed`` the answer missed the format: no evidence either way, never a veto, never a pass.

Evidence comes only from an answer that is, once its thinking is set aside, exactly one
``<execution_result>`` block (whitespace and one code fence inside tolerated) holding a JSON
object or array that is not an echo of the call. Every other shape has its own ``parse`` class
(``PARSE_CLASSES``), so real models' misses can be counted instead of guessed at.
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
ParseClass = Literal[
    "ok",  # one well-formed block: evidence
    "empty",  # no text at all
    "thinking_only",  # thinking, then nothing
    "truncated",  # cut by the token limit before the block closed
    "no_block",  # no <execution_result> (bare JSON or prose)
    "unclosed",  # a block opened and never closed, though not cut by the limit
    "not_json",  # the block holds no JSON value
    "not_object",  # JSON that is neither a non-empty object nor an array
    "echo",  # the call (or its arguments) written back instead of a result
    "multiple_blocks",  # more than one block: which one is the result is a guess
    "prose_around",  # a block with other text beside it, inside or outside
    "refusal",  # a refusal that is not a veto's shape
]
PARSE_CLASSES: tuple[ParseClass, ...] = (
    "ok", "empty", "thinking_only", "truncated", "no_block", "unclosed", "not_json",
    "not_object", "echo", "multiple_blocks", "prose_around", "refusal",
)  # fmt: skip

_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FENCE = re.compile(r"\A```[\w-]*[ \t]*\n?(.*?)\n?```\Z", re.DOTALL)
_RESULT_OPEN = "<execution_result>"
_RESULT_CLOSE = "</execution_result>"
_REFUSAL = re.compile(
    r"\b(sorry|cannot|can't|can not|unable to|won't|not able to|as an ai)\b", re.IGNORECASE
)


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
    parse: ParseClass = "ok"


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


def classify_result(value: Any) -> ImaginedResult:
    """Classify an already-decoded imagined result (see the module docstring)."""
    if isinstance(value, list):
        return ImaginedResult("ok", value)
    if not isinstance(value, dict) or not value:
        return _miss("not_object", "not a non-empty object or an array")
    if "error_tool_call" in value:
        veto = value["error_tool_call"]
        code = veto.get("code") if isinstance(veto, dict) else None
        if not isinstance(code, str):
            return _miss("refusal", "error_tool_call without a string code")
        return ImaginedResult("veto", value, code if code in VETO_CODES else UNKNOWN_VETO)
    if "error" in value:
        return ImaginedResult("error", value)
    return ImaginedResult("ok", value)


def _miss(parse: ParseClass, detail: str) -> ImaginedResult:
    return ImaginedResult("unparsed", detail=detail, parse=parse)


def _is_echo(value: Any, name: str | None, arguments: Any) -> bool:
    """Whether an imagined result merely writes the call, or its arguments, back."""
    if name is None or not isinstance(value, dict):
        return False
    if value.get("name") == name and ("arguments" in value or "parameters" in value):
        return True
    return bool(arguments) and value == arguments


def _without_block(rest: str) -> ImaginedResult:
    if _REFUSAL.search(rest) and not _load_json(rest)[0]:
        return _miss("refusal", "a refusal in prose, not a veto")
    return _miss("no_block", "no <execution_result> block")


def parse_execution_result(
    text: str | None,
    *,
    truncated: bool = False,
    call_name: str | None = None,
    call_arguments: Any = None,
) -> ImaginedResult:
    """Read a rehearsal-role answer: one ``<execution_result>{JSON}</execution_result>``.

    ``truncated`` says the engine stopped at the token limit; ``call_name`` and
    ``call_arguments`` (the call being imagined) let an echo of the call be told apart.
    """
    if not text or not text.strip():
        return _miss("empty", "empty answer")
    _, rest = split_thinking(text)
    if not rest.strip():
        return _miss("truncated" if truncated else "thinking_only", "thinking only")
    opened = rest.count(_RESULT_OPEN)
    if opened == 0:
        return _miss("truncated", "cut by the token limit") if truncated else _without_block(rest)
    if opened > 1:
        return _miss("multiple_blocks", f"{opened} <execution_result> blocks")
    before, _, after = rest.partition(_RESULT_OPEN)
    body, closed, beyond = after.partition(_RESULT_CLOSE)
    if not closed:
        if truncated:
            return _miss("truncated", "cut by the token limit inside the block")
        return _miss("unclosed", "<execution_result> never closed")
    inner = strip_fences(body)
    try:
        value = json.loads(inner)
    except (ValueError, RecursionError):
        found, _ = _load_json(inner)
        if found:
            return _miss("prose_around", "text beside the JSON inside the block")
        return _miss("not_json", "no JSON value in the block")
    if (before + beyond).strip():
        return _miss("prose_around", "text outside the block")
    if _is_echo(value, call_name, call_arguments):
        return _miss("echo", "the call written back, not its result")
    return classify_result(value)
