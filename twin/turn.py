"""What one choice generates, and how vLLM's parsers would hand it back.

A policy writes a ``Draft`` (thinking, text, tool calls). ``finish`` renders it as the raw text the
model would emit (``<think>…</think>`` then content then hermes ``<tool_call>`` blocks), applies
``max_tokens`` and ``stop`` to that text, and parses it back the way vLLM's qwen3 reasoning parser
and hermes tool parser do — so a cut inside a tool call leaves plain content, as on a real engine.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass

from twin.tokens import count_tokens, truncate_tokens
from twin.worlds.base import Call

_TOOL_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_THINK_END = "\n</think>\n\n"


@dataclass(frozen=True)
class Draft:
    """A policy's answer before rendering: thinking, text and tool calls."""

    reasoning: str
    content: str = ""
    calls: tuple[Call, ...] = ()


@dataclass(frozen=True)
class ToolCallOut:
    """A parsed tool call as vLLM returns it."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ChoiceOutput:
    """One finished choice: parsed fields, finish reason and its generated-token count."""

    index: int
    reasoning: str | None
    content: str | None
    tool_calls: tuple[ToolCallOut, ...]
    finish_reason: str
    completion_tokens: int


def tool_call_id(rng: random.Random) -> str:
    """An id shaped like vLLM's: ``chatcmpl-tool-`` and 32 hex digits."""
    return f"chatcmpl-tool-{rng.getrandbits(128):032x}"


def render_calls(calls: tuple[Call, ...]) -> str:
    return "".join(
        "\n<tool_call>\n"
        + json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False)
        + "\n</tool_call>"
        for c in calls
    )


def parse_hermes(text: str, rng: random.Random) -> tuple[str | None, tuple[ToolCallOut, ...]]:
    """Split post-thinking text into content and tool calls (hermes parser semantics)."""
    start = text.find("<tool_call>")
    if start < 0:
        return (text or None), ()
    calls: list[ToolCallOut] = []
    for body in _TOOL_BLOCK.findall(text[start:]):
        try:
            parsed = json.loads(body)
            name = str(parsed["name"])
            arguments = json.dumps(parsed.get("arguments", {}), ensure_ascii=False)
        except (json.JSONDecodeError, KeyError, TypeError):
            return text, ()
        calls.append(ToolCallOut(tool_call_id(rng), name, arguments))
    if not calls:
        return text, ()
    content = text[:start].strip()
    return (content or None), tuple(calls)


def finish(
    draft: Draft,
    *,
    index: int,
    thinking: bool,
    max_tokens: int | None,
    stop: list[str],
    rng: random.Random,
) -> ChoiceOutput:
    """Render, cut and parse one choice."""
    body = draft.content + render_calls(draft.calls)
    raw = f"<think>\n{draft.reasoning}{_THINK_END}{body}" if thinking else body
    finish_reason = "tool_calls" if draft.calls else "stop"
    if max_tokens is not None and count_tokens(raw) > max_tokens:
        raw = truncate_tokens(raw, max_tokens)
        finish_reason = "length"
    reasoning: str | None = None
    rest = raw
    if thinking:
        head, sep, rest = raw.partition(_THINK_END)
        reasoning = head.removeprefix("<think>\n")
        if not sep:
            rest = ""
    for word in stop:
        if word and word in rest:
            rest = rest[: rest.index(word)]
            finish_reason = "stop"
    content, calls = parse_hermes(rest, rng)
    if finish_reason == "tool_calls" and not calls:
        finish_reason = "stop"
    return ChoiceOutput(
        index=index,
        reasoning=reasoning,
        content=content,
        tool_calls=calls,
        finish_reason=finish_reason,
        completion_tokens=count_tokens(raw) + 1,  # +1: the end-of-turn token
    )
