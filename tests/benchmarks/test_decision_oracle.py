"""The benchmark's call accounting and per-tool oracle (benchmarks/decision_oracle.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from benchmarks.decision_facts import NO_TOOL, Episode, TurnFacts, turn_split
from benchmarks.decision_oracle import oracle, split, tally, turn_oracle


def _step(tool: str | None, *sources: str) -> dict[str, Any]:
    calls = [{"id": "c", "name": tool, "arguments": "{}"}] if tool else []
    return {"turn": {"tool_calls": calls}, "observations": [{"source": s} for s in sources]}


def test_a_turn_splits_into_its_anchor_and_imagined_observations() -> None:
    """The first trajectory's first call is the anchor; every imagined observation counts."""
    trace = [
        {"steps": [_step("get_order", "imagined"), _step("cancel", "imagined")]},
        {"steps": [_step("other", "check")]},
        "junk",
    ]
    assert turn_split(trace) == ("get_order", 2)
    assert turn_split([{"steps": [_step(None)]}]) == (NO_TOOL, 0)
    assert turn_split(None) == (NO_TOOL, 0)


def _turn(anchor: str | None, calls: int | None, imagined: int | None = None) -> TurnFacts:
    return TurnFacts(calls=1, schema_invalid=0, invalid_with_valid=None, never_rehearsed=None,
                     rehearsed=calls is not None, engine_calls=calls, anchor=anchor,
                     imagined=imagined)  # fmt: skip


def test_tally_and_split_per_anchor_tool() -> None:
    """Turns, calls and imagined observations per anchor; errors per committed tool; an
    unreported call count is one call."""
    episode = Episode(0, "retail", "t")
    episode.turns = [_turn("a", 3, 2), _turn("a", 1, 0), _turn(None, None)]
    episode.errors_by_tool = {"a": 1, "b": 2}
    rows = tally([episode])
    assert rows == {
        "a": {"turns": 2, "calls": 4, "imagined": 2, "errors": 1},
        NO_TOOL: {"turns": 1, "calls": 1, "imagined": 0},
        "b": {"errors": 2},
    }
    assert split(rows) == pytest.approx({"per_turn": 5 / 3, "extra": 2 / 3, "imagination": 2 / 3})


def _rows(**tools: tuple[int, int, int]) -> dict[str, dict[str, int]]:
    return {t: {"turns": n, "calls": c, "errors": e} for t, (n, c, e) in tools.items()}


def test_the_oracle_picks_the_cheapest_k_per_tool_that_keeps_k4s_removals() -> None:
    """K = 4 removes 4 errors with 40 calls over 20 turns; the oracle keeps a's K = 1 (its
    removals at 12 calls) and b's off (nothing to remove): 22 calls over 20 turns."""
    by_option = {
        0: _rows(a=(10, 10, 4), b=(10, 10, 0)),
        1: _rows(a=(10, 12, 0), b=(10, 12, 0)),
        2: _rows(a=(10, 15, 0), b=(10, 15, 1)),
        4: _rows(a=(10, 20, 0), b=(10, 20, 0)),
        8: _rows(a=(10, 30, 0), b=(10, 30, 0)),
    }
    found = oracle(by_option)
    assert found is not None
    assert found["removed"] == 4
    assert found["per_turn"] == pytest.approx(22 / 20)
    assert found["extra"] == pytest.approx(2 / 20)
    assert found["of_k4"] == pytest.approx((22 / 20) / 2.0)
    assert found["extra_of_k4"] == pytest.approx(0.1)
    assert oracle({0: {}, 4: {}}) is None
    flat = {k: _rows(a=(1, 1, 0)) for k in (0, 1, 2, 4, 8)}
    assert oracle(flat)["extra_of_k4"] is None  # type: ignore[index]


def test_the_per_turn_bound_spends_only_where_the_commit_changed() -> None:
    """K = 4's calls on turns whose commit is not the anchor, the acting call elsewhere: 4 turns,
    one replaced (3 calls), one kept after 2 calls, one unrehearsed, one off (no summary)."""
    episode = Episode(0, "retail", "t")
    episode.turns = [
        replace(_turn("a", 3), commit_path="replaced"),
        replace(_turn("a", 2), commit_path="anchor"),
        replace(_turn("b", 1), commit_path="auto_off"),
        _turn(None, None),
    ]
    bound = turn_oracle([episode])
    assert bound == pytest.approx({"per_turn": 6 / 4, "extra": 2 / 4, "changed": 1 / 4})
    assert turn_oracle([]) == {"per_turn": 0.0, "extra": 0.0, "changed": 0.0}
