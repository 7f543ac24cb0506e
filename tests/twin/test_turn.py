"""Rendering a draft into vLLM-parsed fields: thinking, tool calls, length and stop cuts."""

from __future__ import annotations

import json
import random

from twin.turn import Draft, finish
from twin.worlds.base import Call

DRAFT = Draft(
    reasoning="I should look the order up.", calls=(Call("get_order", {"order_id": "W1"}),)
)


def test_tool_call_turn_parses_like_hermes() -> None:
    """A full turn yields reasoning, no content, one call with a vLLM-style id."""
    out = finish(DRAFT, index=0, thinking=True, max_tokens=None, stop=[], rng=random.Random(1))
    assert out.reasoning == "I should look the order up."
    assert out.content is None
    assert out.finish_reason == "tool_calls"
    (call,) = out.tool_calls
    assert call.id.startswith("chatcmpl-tool-")
    assert len(call.id) == len("chatcmpl-tool-") + 32
    assert json.loads(call.arguments) == {"order_id": "W1"}


def test_max_tokens_cut_is_length_without_tool_calls() -> None:
    """A cut inside the turn gives finish_reason length and no parsed calls."""
    out = finish(DRAFT, index=0, thinking=True, max_tokens=5, stop=[], rng=random.Random(1))
    assert out.finish_reason == "length"
    assert out.tool_calls == ()
    assert out.completion_tokens <= 6


def test_thinking_off_has_no_reasoning() -> None:
    """enable_thinking false leaves reasoning empty."""
    out = finish(DRAFT, index=0, thinking=False, max_tokens=None, stop=[], rng=random.Random(1))
    assert out.reasoning is None
    assert out.tool_calls


def test_stop_string_cuts_content() -> None:
    """A stop string ends the content before it, with finish_reason stop."""
    draft = Draft(reasoning="r", content="Your order is cancelled. Anything else?")
    out = finish(draft, index=0, thinking=True, max_tokens=None, stop=["."], rng=random.Random(1))
    assert out.content == "Your order is cancelled"
    assert out.finish_reason == "stop"
