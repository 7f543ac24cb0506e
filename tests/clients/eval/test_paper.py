"""The paper's figures from episodes: BFCL-MT, τ² as the mean of its domains, the overall."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from rehearsal_gateway.clients.eval.episode import Cell, Episode
from rehearsal_gateway.clients.eval.paper import BFCL, paper_rows

OWNER = {"b1": BFCL, "b2": BFCL, "airline/1": "tau2-airline", "retail/1": "tau2-retail",
         "telecom/1": "tau2-telecom"}  # fmt: skip
SUITE: Any = SimpleNamespace(
    components={name: None for name in (BFCL, "tau2-airline", "tau2-retail", "tau2-telecom")},
    owner=OWNER,
)


def _episodes(cell: Cell, passed: set[str]) -> list[Episode]:
    return [
        Episode(task=task, cell=cell.name, mode=cell.mode, budget=cell.budget, seed=0,
                attempt="a", success=task in passed)
        for task in OWNER
    ]  # fmt: skip


def test_overall_is_the_mean_of_bfcl_and_the_mean_of_the_domains() -> None:
    """BFCL 1/2 = 50, τ² = mean(100, 0, 100) = 66.7, overall 58.3; paired against off."""
    off, par = Cell("off"), Cell("parallel", 4)
    episodes = _episodes(off, {"b1", "airline/1"}) + _episodes(
        par, {"b1", "airline/1", "telecom/1"}
    )
    rows = paper_rows(SUITE, [off, par], {e.key: e for e in episodes}, [0], list(OWNER))
    assert rows[1].components == {BFCL: 50.0, "tau2-airline": 100.0, "tau2-retail": 0.0,
                                  "tau2-telecom": 100.0}  # fmt: skip
    assert rows[1].tau2 == pytest.approx(200 / 3)
    assert rows[1].overall == pytest.approx((50 + 200 / 3) / 2)
    assert rows[0].overall == pytest.approx((50 + 100 / 3) / 2)
    assert rows[1].delta == pytest.approx(rows[1].overall - rows[0].overall)
    assert (rows[1].wins, rows[1].losses) == (1, 0)
    assert rows[1].ci_low < rows[1].overall < rows[1].ci_high


def test_all_passed_still_has_an_interval() -> None:
    """Few tasks at 100%: the Agresti–Coull variance keeps the interval open below."""
    off = Cell("off")
    episodes = _episodes(off, set(OWNER))
    (row,) = paper_rows(SUITE, [off], {e.key: e for e in episodes}, [0], list(OWNER))
    assert row.overall == 100.0
    assert row.ci_high == 100.0
    assert row.ci_low < 80.0
