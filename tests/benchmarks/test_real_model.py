"""The real-model benchmark's arithmetic: figures read from responses, rows paired against off.

The benchmark itself needs the real model and most of an hour (``make bench-real-model``); what is
pinned here is how it reads a response and how it pairs configurations, on responses shaped as the
gateway returns them.
"""

from __future__ import annotations

from typing import Any

from openai.types.chat import ChatCompletion

from benchmarks.real_model import figures
from benchmarks.real_model_report import CONFIGS, Episode, TurnFigures, summarise


def completion(rehearsal: dict[str, Any] | None = None, cached: int = 0) -> ChatCompletion:
    body: dict[str, Any] = {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "done"}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107,
                  "prompt_tokens_details": {"cached_tokens": cached}},
    }  # fmt: skip
    if rehearsal is not None:
        body["rehearsal"] = rehearsal
    return ChatCompletion.model_validate(body)


def test_a_pass_through_turn_is_one_engine_call_with_its_usage() -> None:
    """Off: one engine call, the engine's token counts, nothing imagined."""
    turn = figures(completion(cached=64), 2.5)
    assert (turn.engine_calls, turn.prompt, turn.cached, turn.completion) == (1, 100, 64, 7)
    assert (turn.parse, turn.agreements, turn.low_trust, turn.wall_s) == ({}, [], False, 2.5)


def test_a_rehearsed_turn_reads_parse_classes_feedback_and_trust() -> None:
    """Rehearsed: engine calls, parse classes, outcome agreements and low trust from the summary."""
    summary = {
        "engine_calls": 5,
        "parse_classes": {"ok": 2, "no_block": 1},
        "feedback": [{"outcome_agreement": True}, {"outcome_agreement": None}],
        "trust": {"get_order": "trusted", "cancel_order": {"policy": "ignore_vetoes"}},
    }
    turn = figures(completion(summary), 9.0)
    assert turn.engine_calls == 5
    assert dict(turn.parse) == {"ok": 2, "no_block": 1}
    assert (turn.agreements, turn.low_trust) == ([True], True)


def episode(task: str, success: bool, errors: int, *turns: TurnFigures) -> Episode:
    return Episode(0, "retail", task, success=success, tool_errors=errors, turns=list(turns))


def test_rows_pair_each_task_with_off() -> None:
    """Worse, better and tool-error pairs are counted per task against off's run of it."""
    off = [episode("a", True, 0), episode("b", False, 2), episode("c", True, 1)]
    low = TurnFigures(1.0, 3, 10, 0, 5, low_trust=True)
    low.parse.update({"ok": 1, "prose_around": 3})
    rehearsed = [
        episode("a", False, 1, TurnFigures(1.0, 1, 10, 0, 5), low),
        episode("b", True, 0),
        episode("c", True, 1),
    ]
    row = summarise(CONFIGS[1], rehearsed, off)
    assert (row["worse_than_off"], row["better_than_off"]) == (1, 1)
    assert (row["more_tool_errors_than_off"], row["fewer_tool_errors_than_off"]) == (1, 1)
    assert (row["success"], row["tool_errors"], row["first_low_trust_turn"]) == (2, 2, 2)
    assert (row["parse"], row["imagined"]) == ({"ok": 1, "prose_around": 3}, 4)
    assert row["engine_calls_per_turn"] == 2.0
    assert summarise(CONFIGS[0], off, off)["worse_than_off"] == 0
