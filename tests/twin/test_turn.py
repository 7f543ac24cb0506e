"""Rendering a draft into vLLM-parsed fields: thinking, tool calls, length and stop cuts."""

from __future__ import annotations

import json
import random

import pytest

from rehearsal_gateway.twin.turn import Draft, finish
from rehearsal_gateway.twin.worlds.base import Call

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
    assert len(call.id) == len("chatcmpl-tool-") + 16
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


def _full_length(draft: Draft, thinking: bool) -> int:
    out = finish(draft, index=0, thinking=thinking, max_tokens=None, stop=[], rng=random.Random(1))
    return out.completion_tokens


@pytest.mark.parametrize("thinking", [True, False], ids=["thinking", "no-thinking"])
def test_cut_counts_exactly_max_tokens(thinking: bool) -> None:
    """A cut generates exactly ``max_tokens`` (no end-of-turn token), like vLLM's usage."""
    whole = _full_length(DRAFT, thinking)  # includes the end-of-turn token
    for limit in range(1, whole + 3):
        out = finish(
            DRAFT, index=0, thinking=thinking, max_tokens=limit, stop=[], rng=random.Random(1)
        )
        assert out.completion_tokens == min(limit, whole)
        assert (out.finish_reason == "length") == (limit < whole)


def test_cut_never_leaves_part_of_a_think_tag() -> None:
    """``</think>`` is one token: a cut leaves the tag whole or absent, never ``</thi``."""
    whole = _full_length(DRAFT, thinking=True)
    for limit in range(1, whole):
        out = finish(DRAFT, index=0, thinking=True, max_tokens=limit, stop=[], rng=random.Random(1))
        assert "<" not in (out.reasoning or ""), (limit, out.reasoning)
        assert "think>" not in (out.content or ""), (limit, out.content)


def test_cut_thought_counts_as_reasoning_tokens() -> None:
    """Usage's reasoning tokens: all of a cut thought, or the thought before ``</think>``."""
    cut = finish(DRAFT, index=0, thinking=True, max_tokens=4, stop=[], rng=random.Random(1))
    assert (cut.content, cut.reasoning_tokens, cut.completion_tokens) == (None, 4, 4)
    whole = finish(DRAFT, index=0, thinking=True, max_tokens=None, stop=[], rng=random.Random(1))
    assert 0 < whole.reasoning_tokens < whole.completion_tokens
    silent = finish(DRAFT, index=0, thinking=False, max_tokens=None, stop=[], rng=random.Random(1))
    assert silent.reasoning_tokens == 0


def test_stop_string_in_thinking_ends_generation_there() -> None:
    """vLLM checks stop strings on all generated text, thinking included, and reports which."""
    rng = random.Random(1)
    out = finish(DRAFT, index=0, thinking=True, max_tokens=None, stop=["look"], rng=rng)
    assert out.reasoning == "I should "
    assert out.content is None
    assert out.tool_calls == ()
    assert (out.finish_reason, out.stop_reason) == ("stop", "look")
    assert out.completion_tokens == len(["<think>", "\n", "I", " ", "should", " ", "look"])
