"""Bare or ```json-fenced JSON tool calls rewritten into hermes ``<tool_call>`` blocks.

The pure half of the ``bare_json`` vLLM tool-parser plugin (tests/vllm/bare_json_tool_parser.py):
no vLLM import, so the project's own test environment checks it. Test and benchmark support only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

PARSER_NAME = "bare_json"
FENCE = "```"
OPEN, CLOSE = "<tool_call>", "</tool_call>"
# The start of a call object whose name is already written, e.g. `{"name": "get_weather"`.
_NAMED_START = re.compile(r'\s*\{\s*"name"\s*:\s*"([^"\\]+)"')
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class Reading:
    """What a text is, so far: ``text`` for hermes, and whether the rest is still undecided."""

    text: str
    undecided: bool = False


def _calls(value: Any, names: set[str]) -> list[dict[str, Any]] | None:
    """The calls ``value`` spells (an object or a list of them), each naming one of ``names``."""
    items = value if isinstance(value, list) else [value]
    calls = []
    for item in items:
        if not isinstance(item, dict) or item.get("name") not in names:
            return None
        arguments = item.get("arguments", item.get("parameters", {}))
        if not isinstance(arguments, dict):
            return None
        calls.append({"name": item["name"], "arguments": arguments})
    return calls or None


def _tagged(raw: str, value: Any, names: set[str]) -> str | None:
    """``raw`` JSON as hermes blocks, or None when it is not a call to a requested tool."""
    calls = _calls(value, names)
    if calls is None:
        return None
    if isinstance(value, dict) and "arguments" in value:
        # The model's own bytes: a stream has already sent a prefix of these arguments.
        return f"{OPEN}\n{raw}\n{CLOSE}"
    return "".join(f"{OPEN}\n{json.dumps(call, ensure_ascii=False)}\n{CLOSE}" for call in calls)


def read(text: str, names: set[str]) -> Reading:
    """Rewrite the first bare or fenced JSON call in ``text`` into hermes form.

    A text whose candidate JSON is not complete yet is ``undecided``: its ``text`` is what can be
    shown now (the prose before the candidate, or an open ``<tool_call>`` once the object's first
    key names a requested tool, so hermes streams the arguments as they come).
    """
    if OPEN in text or not names:
        return Reading(text)
    fence = text.find(FENCE)
    if fence >= 0:
        start = fence
        header_end = text.find("\n", fence)
        if header_end < 0:
            return Reading(text[:start], undecided=True)
        if text[fence + len(FENCE) : header_end].strip().lower() not in ("", "json"):
            return Reading(text)
        body_start = header_end + 1
    elif text.lstrip()[:1] in ("{", "["):
        start = body_start = len(text) - len(text.lstrip())
    else:
        tail = len(text) - len(text.rstrip("`"))
        return Reading(text[: len(text) - tail], undecided=tail > 0)
    body = text[body_start:]
    stripped = body.lstrip()
    if not stripped:
        return Reading(text[:start], undecided=True)
    if stripped[0] not in "{[":
        return Reading(text)
    offset = body_start + len(body) - len(stripped)
    try:
        value, length = _DECODER.raw_decode(stripped)
    except json.JSONDecodeError:
        named = _NAMED_START.match(stripped)
        if named and named.group(1) in names:
            return Reading(f"{text[:start]}{OPEN}\n{stripped}", undecided=True)
        return Reading(text[:start], undecided=True)
    raw = stripped[:length]
    tagged = _tagged(raw, value, names)
    if tagged is None:
        return Reading(text)
    rest = text[offset + length :]
    if fence >= 0:
        # Up to the closing fence belongs to the call (nothing while it is still being written).
        closing = rest.find(FENCE)
        rest = rest[closing + len(FENCE) :] if closing >= 0 else ""
    return Reading(text[:start] + tagged + rest)
