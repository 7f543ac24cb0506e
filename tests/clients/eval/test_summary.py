"""Per-cell figures: the interval, the paired sign test and the percentiles against known values."""

from __future__ import annotations

import numpy as np
import pytest

from rehearsal_gateway.clients.eval.episode import Cell, Episode
from rehearsal_gateway.clients.eval.summary import percentile, sign_test, summarize, to_csv, wilson


@pytest.mark.parametrize(
    ("successes", "n", "low", "high"),
    [
        pytest.param(0, 20, 0.0, 0.1611, id="none-of-20"),
        pytest.param(10, 20, 0.2993, 0.7007, id="half-of-20"),
        pytest.param(20, 20, 0.8389, 1.0, id="all-of-20"),
        pytest.param(1, 10, 0.0179, 0.4042, id="one-of-10"),
    ],
)
def test_wilson_interval_matches_the_textbook(successes: int, n: int, low: float, high: float):
    """The 95% Wilson score interval has its published values (Newcombe 1998, table I)."""
    assert wilson(successes, n) == pytest.approx((low, high), abs=1e-4)


def test_sign_test_is_the_exact_binomial():
    """Five wins and no loss is p = 2/32; no discordant pair has no p at all."""
    assert sign_test(5, 0) == pytest.approx(0.0625)
    assert sign_test(3, 3) == 1.0
    assert sign_test(0, 0) is None


def test_percentiles_agree_with_numpy():
    """p50 and p90 are numpy's default (linear) percentiles."""
    values = [12.0, 3.5, 40.0, 7.25, 19.0, 1.0, 88.0]
    for q in (50, 90):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert percentile([5.0], 90) == 5.0
    assert percentile([], 50) is None


def _episode(cell: Cell, task: str, success: bool, **fields) -> Episode:
    return Episode(task=task, cell=cell.name, mode=cell.mode, budget=cell.budget, seed=0,
                   attempt="a", success=success, **fields)  # fmt: skip


def test_cells_pair_with_off_on_the_same_tasks():
    """Wins/losses count only tasks both cells ran; cost is per request; CSV has a row per cell."""
    off, par = Cell("off"), Cell("parallel", 4)
    episodes = [
        _episode(off, "a", False, requests=2, engine_calls=2, latency_ms=[10.0, 20.0]),
        _episode(off, "b", True, requests=2, engine_calls=2, latency_ms=[10.0, 30.0]),
        _episode(par, "a", True, requests=2, engine_calls=8, vetoes={"INVALID_PARAMETERS": 2},
                 outcome_agree=1, outcome_checked=2, structural=[0.5, 1.0]),
        _episode(par, "b", True, requests=2, engine_calls=6),
        _episode(par, "c", False, requests=1, engine_calls=3),  # not asked for: left out
    ]  # fmt: skip
    rows = summarize([off, par], {e.key: e for e in episodes}, [0], ["a", "b"])
    assert [(r.cell, r.successes, r.episodes) for r in rows] == [
        ("off", 1, 2),
        ("parallel-4", 2, 2),
    ]
    assert (rows[1].paired, rows[1].wins, rows[1].losses) == (2, 1, 0)
    assert rows[1].engine_calls_per_turn == 3.5
    assert rows[1].vetoes == {"INVALID_PARAMETERS": 2}
    assert (rows[1].outcome_agreement, rows[1].structural_fidelity) == (0.5, 0.75)
    assert rows[0].latency_p50_ms == 15.0
    lines = to_csv(rows).splitlines()
    assert len(lines) == 3
    assert "vetoes_by_kind" in lines[0]
    assert "INVALID_PARAMETERS:2" in lines[2]


def test_pass_hat_k_is_taus_formula_over_trials():
    """Per task C(c, k) / C(n, k), averaged: 2 of 3 runs passed gives 2/3, 1/3 and 0."""
    par = Cell("parallel", 2)
    runs = [(True, True, False), (True, True, True), (False, False, False)]
    episodes = [
        Episode(task=f"t{task}", cell=par.name, mode=par.mode, budget=2, seed=seed,
                attempt="a", success=passed)
        for task, results in enumerate(runs) for seed, passed in enumerate(results)
    ]  # fmt: skip
    (row,) = summarize([par], {e.key: e for e in episodes}, [0, 1, 2], ["t0", "t1", "t2"])
    assert row.pass_hat_k == pytest.approx({"1": (2 / 3 + 1) / 3, "2": (1 / 3 + 1) / 3,
                                            "3": 1 / 3}, abs=1e-4)  # fmt: skip
    assert row.pass_hat_k["1"] == pytest.approx(row.success_rate, abs=1e-4)
    header = to_csv([row]).splitlines()[0].split(",")
    assert header[-3:] == ["pass^1", "pass^2", "pass^3"]
