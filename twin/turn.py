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

from .logprobs import END_OF_TURN
from .tokens import count_tokens, tokenize, tokens_through, truncate_tokens
from .worlds.base import Call

_TOOL_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
THINK_CLOSE = "</think>"
_THINK_END = f"\n{THINK_CLOSE}\n\n"


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
    """One finished choice: parsed fields, why it ended and its generated-token counts."""

    index: int
    reasoning: str | None
    content: str | None
    tool_calls: tuple[ToolCallOut, ...]
    finish_reason: str
    completion_tokens: int
    reasoning_tokens: int = 0
    stop_reason: str | None = None  # the stop string that ended it, as vLLM reports
    # Every token generated, in order: the end-of-turn token last when the turn ended on it, and
    # past a stop string the tokens that spelled it (vLLM scores them all in ``logprobs``).
    tokens: tuple[str, ...] = ()

    @property
    def generated_text(self) -> str:
        """The generated tokens' text, the end-of-turn token left out."""
        return "".join(self.tokens[:-1] if self.ended else self.tokens)

    @property
    def answer_finish_reason(self) -> str:
        """The reason a whole answer gives: vLLM says ``tool_calls`` whenever its parser found
        calls, even in a turn ``max_tokens`` cut after them."""
        return "tool_calls" if self.tool_calls else self.finish_reason

    @property
    def stream_finish_reason(self) -> str:
        """The reason a stream ends with: vLLM keeps ``length`` once calls were streamed, and
        says ``tool_calls`` for a turn that stopped after them (stop string included)."""
        return (
            "tool_calls"
            if self.tool_calls and self.finish_reason != "length"
            else (self.finish_reason)
        )

    @property
    def ended(self) -> bool:
        """Whether the end-of-turn token was generated (not cut by max_tokens or a stop)."""
        return bool(self.tokens) and self.tokens[-1] == END_OF_TURN


def tool_call_id(rng: random.Random) -> str:
    """An id shaped like vLLM's: ``chatcmpl-tool-`` and 16 hex digits."""
    return f"chatcmpl-tool-{rng.getrandbits(64):016x}"


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


def _first_stop(raw: str, stop: list[str]) -> tuple[int, str] | None:
    """Where the earliest stop string starts in the generated text, and which one it is."""
    found = [(raw.find(word), word) for word in stop if word and word in raw]
    return min(found) if found else None


def _split_thinking(raw: str) -> tuple[str, str, bool]:
    """vLLM's qwen3 reasoning parser: text before ``</think>`` is reasoning (all of it if the
    tag never came), the rest is content."""
    head, sep, rest = raw.partition(THINK_CLOSE)
    reasoning = head.removeprefix("<think>").removeprefix("\n")
    if sep:
        return reasoning.removesuffix("\n"), rest.lstrip("\n"), True
    return reasoning, "", False


def finish(
    draft: Draft,
    *,
    index: int,
    thinking: bool,
    max_tokens: int | None,
    stop: list[str],
    rng: random.Random,
) -> ChoiceOutput:
    """Render, cut and parse one choice.

    Generation ends at the first of: a stop string (checked on everything generated, thinking
    included, as vLLM's detokenizer does; the text stops before it), ``max_tokens`` (no
    end-of-turn token fits, so exactly ``max_tokens`` are counted) or the end-of-turn token
    (counted as one more).
    """
    body = draft.content + render_calls(draft.calls)
    raw = f"<think>\n{draft.reasoning}{_THINK_END}{body}" if thinking else body
    finish_reason = "tool_calls" if draft.calls else "stop"
    spelled = (*tokenize(raw), END_OF_TURN)  # what would come out, the end-of-turn token last
    generated = len(spelled)
    stop_reason: str | None = None
    hit = _first_stop(raw, stop)
    if hit is not None:
        generated = tokens_through(raw, hit[0] + len(hit[1]))
    if max_tokens is not None and generated > max_tokens:
        raw = truncate_tokens(raw, max_tokens)
        generated = max_tokens
        finish_reason = "length"
    elif hit is not None:
        raw = raw[: hit[0]]
        finish_reason, stop_reason = "stop", hit[1]
    reasoning: str | None = None
    rest = raw
    reasoning_tokens = 0
    if thinking:
        reasoning, rest, closed = _split_thinking(raw)
        # Only a cut or a stop string ends a thought early, so no end-of-turn token to leave out.
        reasoning_tokens = count_tokens(raw[: raw.index(THINK_CLOSE)]) if closed else generated
    content, calls = parse_hermes(rest, rng)
    if finish_reason == "tool_calls" and not calls:
        finish_reason = "stop"
    return ChoiceOutput(
        index=index,
        reasoning=reasoning,
        content=content,
        tool_calls=calls,
        finish_reason=finish_reason,
        completion_tokens=generated,
        reasoning_tokens=reasoning_tokens,
        stop_reason=stop_reason,
        tokens=spelled[:generated],
    )
