"""The compounding plot's reading of the decisions benchmark's cells."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from benchmarks.decision_plot import plot, points, shape, table


def cell(run: str, errors: float, calls: float | None, worse: int | None = 0) -> dict[str, Any]:
    return {
        "fidelity": 0.8, "skill": 0.5, "run": run, "tool_errors": errors,
        "engine_calls_per_turn": calls, "worse": worse, "better": 1,
    }  # fmt: skip


CELLS = [
    cell("off", 40.0, None, None),
    cell("parallel anchored reads", 4.0, 2.4),
    cell("parallel anchored reads K=2 d=2", 9.0, 3.2, 2),
    cell("parallel anchored reads K=auto", 7.0, 1.9),
    cell("parallel anchored reads K=8", 3.0, None),  # no calls reported: left out
]


def test_shapes_are_read_from_the_run_names() -> None:
    assert shape("parallel anchored reads") == ("4", 1)
    assert shape("parallel anchored reads K=2 d=2") == ("2", 2)
    assert shape("parallel anchored K=auto") == ("auto", 1)


def test_points_pair_each_cell_with_its_twins_off() -> None:
    found = points(CELLS)
    assert [(p["k"], p["depth"], p["removed"], p["worse"]) for p in found] == [
        ("4", 1, 36.0, 0), ("auto", 1, 33.0, 0), ("2", 2, 31.0, 2),
    ]  # fmt: skip
    assert "| 0.8 | 0.5 | auto | 1 | 33.0 (40.0) | 0 / 1 | 1.90 |" in table(found)


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="plot extra")
def test_the_plot_is_written(tmp_path: Path) -> None:
    path = plot(points(CELLS), tmp_path / "c.png", "test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
