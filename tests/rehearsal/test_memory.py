"""The memory note: the layout of docs/formats.md byte for byte, within a token budget."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rehearsal_gateway.rehearsal.memory import (
    MemoryEntry,
    entry_for,
    estimate_tokens,
    note_message,
    render_note,
)
from rehearsal_gateway.rehearsal.testing import answer_turn, tool_turn
from rehearsal_gateway.rehearsal.trace import ImaginedObservation, Step, Trajectory

FORMATS = Path(__file__).parents[2] / "docs" / "formats.md"


def documented_example() -> str:
    """The note shown under "Exact layout" in docs/formats.md."""
    text = FORMATS.read_text(encoding="utf-8")
    match = re.search(r"Exact layout:\n\n```\n(.*?)\n```", text, re.DOTALL)
    assert match is not None
    return match.group(1)


def observed(
    turn_name: str, args: dict[str, object], result: object, verdict: str, code: str | None = None
) -> Trajectory:
    turn = tool_turn(turn_name, args)
    obs = ImaginedObservation(turn.tool_calls[0], verdict, result, code)  # type: ignore[arg-type]
    ended = "depth" if verdict == "ok" else verdict
    return Trajectory(0, (0,), (Step(turn, (obs,)),), ended)  # type: ignore[arg-type]


def test_note_matches_the_documented_layout() -> None:
    """Entries built from trajectories render exactly as the pinned example."""
    message = "reason must be one of ..."
    trajectories = [
        observed(
            "get_order", {"order_id": "#W1001"}, {"order_id": "#W1001", "status": "pending"}, "ok"
        ),
        observed(
            "cancel_order",
            {"order_id": "#W1001", "reason": "whim"},
            {"error_tool_call": {"code": "INVALID_PARAMETERS", "message": message}},
            "veto",
            "INVALID_PARAMETERS",
        ),
        Trajectory(2, (2,), (Step(answer_turn("Done.")),), "answer"),
    ]
    note = render_note([entry_for(t) for t in trajectories], max_tokens=10_000)
    assert note == documented_example()


def test_note_goes_last_as_a_user_message() -> None:
    """The note travels as a user message (it is appended after the conversation)."""
    assert note_message("n") == {"role": "user", "content": "n"}


def test_long_observations_are_cut_to_the_budget() -> None:
    """Imagined texts share what the fixed lines leave and end in an ellipsis when cut."""
    entries = [MemoryEntry("ok", 1.0, ("f {}",), "x" * 4000), MemoryEntry("ok", 1.0, ("g {}",))]
    note = render_note(entries, max_tokens=100)
    assert estimate_tokens(note) <= 100
    assert "imagined: x" in note
    assert "…\n[2]" in note
    assert note.count("imagined: -") == 1


def test_fixed_lines_over_budget_drop_trailing_entries() -> None:
    """When even the fixed lines do not fit, later entries go; the first always stays."""
    entries = [MemoryEntry("ok", 1.0, (f"tool_{i} {{}}",), "{}") for i in range(20)]
    note = render_note(entries, max_tokens=80)
    assert "[1] outcome=ok" in note
    assert "[20]" not in note
    assert render_note(entries[:1], max_tokens=1).count("[1]") == 1


def test_estimate_is_four_characters_per_token() -> None:
    """The token estimate rounds characters / 4 up."""
    assert [estimate_tokens(t) for t in ("", "a", "abcd", "abcde")] == [0, 1, 1, 2]


def test_entries_round_trip_and_reject_malformed_data() -> None:
    """Stored entries read back equal; malformed ones read as None; scores are clamped."""
    entry = MemoryEntry("veto:TOOL_NOT_AVAILABLE", 0.0, ("f {}",), '{"a":1}')
    assert MemoryEntry.from_dict(entry.to_dict()) == entry
    assert MemoryEntry.from_dict({**entry.to_dict(), "score": 7}) == MemoryEntry(
        "veto:TOOL_NOT_AVAILABLE", 1.0, ("f {}",), '{"a":1}'
    )
    for bad in (
        None,
        {"outcome": 1, "score": 1, "actions": ["a"]},
        {"outcome": "ok", "score": True, "actions": ["a"]},
        {"outcome": "ok", "score": 1, "actions": []},
        {"outcome": "ok", "score": 1, "actions": [1]},
        {"outcome": "ok", "score": 1, "actions": ["a"], "imagined": 3},
    ):
        assert MemoryEntry.from_dict(bad) is None


@pytest.mark.parametrize(
    ("outcome", "score", "avoided"),
    [
        pytest.param("ok", 1.0, False, id="ok"),
        pytest.param("ok", 0.4, True, id="low-score"),
        pytest.param("veto:INVALID_PARAMETERS", 0.0, True, id="veto"),
        pytest.param("error", 0.0, True, id="error"),
        pytest.param("unparsed", 0.0, True, id="unparsed"),
        pytest.param("open", 0.5, False, id="open"),
    ],
)
def test_avoided_follows_the_documented_reading(outcome: str, score: float, avoided: bool) -> None:
    """veto, error, unparsed or a score under 0.5 mark an action to avoid."""
    assert MemoryEntry(outcome, score, ("a",)).avoided is avoided


def test_unparsed_first_observation_shows_a_dash() -> None:
    """An entry whose observation could not be read shows ``imagined: -``."""
    traj = observed("f", {}, None, "unparsed")
    assert entry_for(traj).imagined is None
    assert entry_for(traj).outcome == "unparsed"
